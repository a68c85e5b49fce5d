#!/usr/bin/env bash
# Runs the fuzz harness (tests/tests/integration/fuzz.rs) for longer than CI
# does: every target for SECONDS seconds (default 600), or only the targets
# named. A crash fails the run and leaves its input in target/fuzz-crashes/;
# add it to tests/corpus/fuzz/<target>/ once fixed, as a seed.
#
#   tests/fuzz.sh            # every target, 10 minutes each
#   SECONDS_EACH=3600 tests/fuzz.sh sql parquet
set -euo pipefail
cd "$(dirname "$0")/.."
filters=("$@")
if [ ${#filters[@]} -eq 0 ]; then filters=(""); fi
for target in "${filters[@]}"; do
  LAKEHOST_TEST_FUZZ_SECONDS="${SECONDS_EACH:-600}" \
    cargo test -p lakehost-tests --test integration --locked -- "fuzz::fuzz_${target}" --nocapture
done
