"""A keyring backend for the SDK tests: the `comotion` CLI keeps a user's
refresh token in the system keyring, which a CI machine has none of. Chosen
with PYTHON_KEYRING_BACKEND=test_keyring.FileKeyring; the passwords live in
the JSON file LAKEHOST_TEST_KEYRING.
"""

import json
import os

from keyring.backend import KeyringBackend


class FileKeyring(KeyringBackend):
    priority = 1

    def _path(self):
        return os.environ["LAKEHOST_TEST_KEYRING"]

    def _read(self):
        try:
            with open(self._path()) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def get_password(self, service, username):
        return self._read().get(service, {}).get(username)

    def set_password(self, service, username, password):
        entries = self._read()
        entries.setdefault(service, {})[username] = password
        with open(self._path(), "w") as f:
            json.dump(entries, f)

    def delete_password(self, service, username):
        entries = self._read()
        entries.get(service, {}).pop(username, None)
        with open(self._path(), "w") as f:
            json.dump(entries, f)
