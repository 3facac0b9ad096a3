"""The commands leave nothing stale and say what is wrong in one line: ``rhtc workers``
removes its config and its log folder when stopped; a config left by a killed ``rhtc
workers`` is named stale, and the next command (``rhtc workers``, a ``remote_map`` without a
broker) starts its own broker past it, where it used to end in a ConnectionError
traceback; a broker that cannot be reached is named with where its URL came from; a count
of workers below one is refused; ``LocalCluster`` removes its folder; ``rhtc broker`` on a
busy port says so in one line and removes its config when stopped; ``rhtc timeline`` names
the bad field and the file.

Real parts: the real ``rhtc`` command in subprocesses (stopped by pid), the brokers and
workers it starts.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rhtc.broker.wire import config as broker_config
from rhtc.broker.wire.config import BrokerConfig
from rhtc.client import remote_map
from tests.kits.chaos import read_until
from tests.conftest import ROOT
from tests.pools.common import free_port, terminate


# -- the CLI leaves nothing stale ----------------------------------------------------------------

def _cli_env(tmp_path: Path) -> dict:
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    for var in ("RHTC_BROKER", "RHTC_KEY", "RHTC_KEY_FILE", "RHTC_CONFIG", "RHTC_NAMESPACE"):
        env.pop(var, None)
    return env


def _start(argv: list[str], env: dict, marker: str, timeout: float = 90) -> tuple[subprocess.Popen, str]:
    """Start `rhtc ARGV` and read its output up to the line holding ``marker``."""
    proc = subprocess.Popen([sys.executable, "-m", "rhtc.client.ops.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=str(ROOT))
    return proc, read_until(proc, marker, timeout)


def _stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> str:
    terminate([proc.pid], grace=30, sig=sig, popen=proc)
    rest, _ = proc.communicate(timeout=30)
    return rest or ""


@pytest.mark.heavy  # starts a broker and workers
def test_rhtc_workers_removes_its_config_and_log_folder_when_stopped(tmp_path):
    env = _cli_env(tmp_path)
    config = tmp_path / "xdg" / "rhtc" / "broker.json"
    proc, out = _start(["workers", "-n", "1"], env, "Ctrl-C stops them")
    try:
        assert "Ctrl-C stops them" in out, out
        data = json.loads(config.read_text())
        assert data["pid"] == proc.pid and data["written_by"] == "rhtc workers"
        log_dir = re.search(r"logs in (\S+)\)", out).group(1)
        assert os.path.isdir(log_dir)
    finally:
        out += _stop(proc)
    assert proc.returncode == 0, out
    assert not config.exists(), "rhtc workers left its broker.json behind"
    assert not os.path.exists(log_dir), f"rhtc workers left {log_dir} behind"


@pytest.mark.heavy  # starts a broker and workers
def test_a_config_left_by_a_killed_rhtc_workers_is_named_stale(tmp_path):
    env = _cli_env(tmp_path)
    config = tmp_path / "xdg" / "rhtc" / "broker.json"
    (tmp_path / "tmp").mkdir()                       # what the killed command leaves stays in tmp_path
    proc, out = _start(["workers", "-n", "1"], dict(env, TMPDIR=str(tmp_path / "tmp")), "Ctrl-C stops them")
    _stop(proc, sig=signal.SIGKILL)                  # no chance to clean up: its children follow it
    assert config.exists()
    with pytest.raises(getattr(broker_config, "StaleConfig", broker_config.BrokerNotConfigured)) as info:
        BrokerConfig.resolve(config_file=config)
    assert (f"{config} points at a broker that is gone (written by `rhtc workers`, pid {proc.pid}, "
            "no longer running): remove it") in str(info.value)

    # the next `rhtc workers` says so and starts its own broker (was: a ConnectionError traceback)
    proc2, out2 = _start(["workers", "-n", "1"], env, "Ctrl-C stops them")
    try:
        assert "points at a broker that is gone" in out2 and "Ctrl-C stops them" in out2, out2
        assert json.loads(config.read_text())["pid"] == proc2.pid
    finally:
        out2 += _stop(proc2)
    assert "Traceback" not in out2, out2
    assert not config.exists()


@pytest.mark.heavy  # starts a broker and workers
def test_remote_map_without_broker_starts_the_local_default_past_a_stale_config(tmp_path):
    config = tmp_path / "broker.json"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    data = json.loads(BrokerConfig(url=f"redis://:pw@127.0.0.1:{free_port()}/0", key=b"k" * 32,
                                   namespace="rhtc:stale").to_json())
    data.update(written_by="rhtc broker", pid=gone.pid, host=socket.gethostname())
    config.write_text(json.dumps(data))
    config.chmod(0o600)
    code = ("import warnings; warnings.simplefilter('always')\n"
            "from rhtc import remote_map\n"
            "print('RESULT', remote_map(str.upper, ['a', 'b'], progress=False))\n"
            "from rhtc.client.local import default_cluster; default_cluster().close()\n")
    env = dict(_cli_env(tmp_path), RHTC_CONFIG=str(config))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(ROOT), capture_output=True,
                         text=True, timeout=180)
    assert "RESULT ['A', 'B']" in out.stdout, out.stdout + out.stderr
    assert f"points at a broker that is gone (written by `rhtc broker`, pid {gone.pid}" in out.stderr, out.stderr


@pytest.mark.heavy
def test_rhtc_workers_on_an_unreachable_broker_says_where_its_url_came_from(tmp_path):
    config = tmp_path / "old.json"                  # written by hand (or an old version): no pid in it
    BrokerConfig(url=f"redis://:pw@127.0.0.1:{free_port()}/0", key=b"k" * 32, namespace="rhtc:x").write(config)
    out = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "workers", "-n", "1"],
                         env=dict(_cli_env(tmp_path), RHTC_CONFIG=str(config)), cwd=str(ROOT),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "cannot reach the broker redis://:***@127.0.0.1" in out.stderr and f"(from {config})" in out.stderr


@pytest.mark.heavy
@pytest.mark.parametrize("n", ["0", "-1"])
def test_rhtc_workers_refuses_a_count_below_one(tmp_path, n):
    out = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "workers", "-n", n], env=_cli_env(tmp_path),
                         cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "-n" in out.stderr and "1" in out.stderr and not (tmp_path / "xdg").exists(), out.stderr


@pytest.mark.heavy  # starts a local cluster's broker
def test_local_cluster_refuses_zero_workers_and_removes_its_folder():
    from rhtc.client.local import LocalCluster
    with pytest.raises(ValueError, match="n_workers must be > 0"):
        LocalCluster(0)
    cluster = LocalCluster(1).start()
    try:
        folder = cluster.log_dir
        assert os.path.isdir(folder)
        assert remote_map(str.upper, ["x"], broker=cluster, progress=False) == ["X"]
    finally:
        cluster.close()
    assert not os.path.exists(folder), f"LocalCluster left {folder} behind"


@pytest.mark.heavy
def test_rhtc_broker_on_a_busy_port_says_so_in_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "broker", "--port", str(port),
                              "--config", str(tmp_path / "b.json")], env=_cli_env(tmp_path), cwd=str(ROOT),
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "already in use" in lines[0], out.stderr
    assert not (tmp_path / "b.json").exists()


@pytest.mark.heavy  # starts a broker
def test_rhtc_broker_removes_its_config_when_stopped(tmp_path):
    config = tmp_path / "b.json"
    proc, out = _start(["broker", "--config", str(config)], _cli_env(tmp_path), "Ctrl-C")
    try:
        assert json.loads(config.read_text())["written_by"] == "rhtc broker"
    finally:
        out += _stop(proc, sig=signal.SIGHUP)                # the terminal closed
    assert not config.exists(), out


# -- messages that name the field and the file ------------------------------------------------

@pytest.mark.heavy
def test_rhtc_timeline_names_the_bad_field_and_the_file(tmp_path):
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"version": 1, "tasks": [
        {"index": 0, "worker": "w1", "start": 1.0, "stop": 2.0},
        {"index": 1, "worker": "w1", "start": "yesterday", "stop": 3.0}]}))
    out = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "timeline", str(record)],
                         cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert str(record) in out.stderr and "tasks[1]" in out.stderr, out.stderr
    assert "'start'" in out.stderr and "'yesterday'" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
