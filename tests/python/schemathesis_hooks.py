"""The generator for the one format lakehost's OpenAPI document names that
JSON Schema cannot spell: `sql`, a statement the engine plans (the query of
POST /query). Loaded by the contract test with SCHEMATHESIS_HOOKS."""

import schemathesis
from hypothesis import strategies as st

integers = st.integers(min_value=-(2**31), max_value=2**31 - 1)
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 _-", max_size=20)
names = st.from_regex(r"\A[a-z][a-z0-9_]{0,15}\Z")


def _literal_select():
    return st.one_of(
        st.builds(lambda n, a: f"SELECT {n} AS {a}", integers, names),
        st.builds(lambda x, y: f"SELECT {x} + {y}", integers, integers),
        st.builds(lambda text: "SELECT '" + text + "' AS t", words),
        st.builds(
            lambda rows: "SELECT * FROM (VALUES "
            + ", ".join(f"({n})" for n in rows)
            + ") AS v(x) ORDER BY x",
            st.lists(integers, min_size=1, max_size=5),
        ),
        st.builds(lambda n: f"SELECT count(*) FROM generate_series(1, {n})", st.integers(0, 1000)),
    )


schemathesis.openapi.format("sql", _literal_select())

# The pipeline deployment paths (docs/pipeline-deploy.md) take a
# component's bytes (`application/wasm`) and a manifest's TOML text
# (`application/toml`): sent as schemathesis sends any bytes and any text.
schemathesis.serializer.alias("application/wasm", "application/octet-stream")
schemathesis.serializer.alias("application/toml", "text/plain")
