"""Loaded at start-up by every Python process of the SDK tests (the SDK, the
`comotion` CLI, the login browser) through PYTHONPATH. It resolves the host
names the Comotion SDK hard-codes to the test server's ports, inside this
process only, as an /etc/hosts entry with a port would. lakehost is not
patched.

LAKEHOST_TEST_RESOLVE: {"auth.comotion.us": port, "comodash.io": port, ...};
a host matches a name or any of its subdomains.
"""

import json
import os
import socket


def _resolve_to_test_server(names):
    original = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else (host or "")
        for suffix, target in names.items():
            if name == suffix or name.endswith("." + suffix):
                return original("127.0.0.1", target, *args, **kwargs)
        return original(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


if os.environ.get("LAKEHOST_TEST_RESOLVE"):
    _resolve_to_test_server(json.loads(os.environ["LAKEHOST_TEST_RESOLVE"]))
