"""Credential files shaped like the field's, for the tests of the analyst's data credentials
(tests/scenarios/test_data_credentials.py) and of the pool keeper (test_pool_keeper.py): a
JWT-shaped bearer token and a PEM file shaped like a grid proxy, both 0600."""
from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path


def make_token(path: Path, expires: float) -> str:
    """A JWT-shaped bearer token expiring at ``expires`` (0600); returns its text."""
    def part(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    text = f"{part({'alg': 'none'})}.{part({'exp': int(expires), 'sub': 'analyst'})}.c2VjcmV0LXNpZ25hdHVyZQ"
    path.write_text(text)
    path.chmod(0o600)
    return text


def make_proxy(path: Path, days: int = 1) -> None:
    """A PEM certificate and key in one 0600 file, shaped like a grid proxy."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days),
                    "-subj", "/CN=rhtc-test-proxy", "-keyout", f"{path}.key", "-out", f"{path}.crt"],
                   check=True, capture_output=True)
    path.write_bytes(Path(f"{path}.crt").read_bytes() + Path(f"{path}.key").read_bytes())
    path.chmod(0o600)
    os.unlink(f"{path}.key")
    os.unlink(f"{path}.crt")
