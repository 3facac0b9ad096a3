"""`rhtc broker` and `rhtc workers` say where the 0600 config is and show the broker URL
redacted: the password and the signing key never reach the terminal (or a notebook's
output, or a shared screen)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.kits.chaos import read_until
from tests.pools.common import terminate

#: runs rhtc broker / rhtc workers, which start a redis-server and workers: the full suite only
pytestmark = pytest.mark.heavy


def _run_until(argv: list[str], env: dict, marker: str, config: Path,
               timeout: float = 60) -> tuple[str, list[str]]:
    """Start ``argv``, read its stdout up to the line holding ``marker``, read the secrets
    from ``config`` (the command removes it on exit), stop it (by pid)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        shown = read_until(proc, marker, timeout)
        secrets = _secrets_in(config)
    finally:
        terminate([proc.pid], grace=20, popen=proc)
        # the workers of `rhtc workers` and the broker's redis-server are its children:
        # SIGTERM to the command ends them; wait for them to exit
        rest, _ = proc.communicate(timeout=30)
    return shown + (rest or ""), secrets


def _secrets_in(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    password = urlsplit(data["url"]).password
    assert password and data["key"], f"{path} should hold a password and a key: {data.keys()}"
    return [password, data["key"]]


def test_rhtc_broker_prints_the_config_path_and_no_password(tmp_path):
    config = tmp_path / "broker.json"
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    out, secrets = _run_until([sys.executable, "-m", "rhtc.client.ops.cli", "broker", "--config",
                               str(config)], env, "Ctrl-C", config)
    assert str(config) in out, out
    assert ":***@" in out, f"the URL should be shown redacted:\n{out}"
    for secret in secrets:
        assert secret not in out, f"`rhtc broker` printed a secret:\n{out}"


def test_rhtc_workers_prints_no_password(tmp_path):
    config = tmp_path / "xdg" / "rhtc" / "broker.json"
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    for var in ("RHTC_BROKER", "RHTC_KEY", "RHTC_KEY_FILE", "RHTC_CONFIG"):
        env.pop(var, None)
    out, secrets = _run_until([sys.executable, "-m", "rhtc.client.ops.cli", "workers", "-n", "1"], env,
                              "Ctrl-C stops them", config)
    assert "started a broker" in out and str(config) in out, out
    for secret in secrets:
        assert secret not in out, f"`rhtc workers` printed a secret:\n{out}"
