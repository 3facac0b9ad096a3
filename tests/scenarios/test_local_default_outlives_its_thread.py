"""The session's local default cluster: it lives as long as the Python process,
whichever thread first started it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

#: starts the local default cluster: the full suite only
pytestmark = pytest.mark.heavy

SCRIPT = textwrap.dedent("""
    import threading, time
    from rhtc import remote_map
    from rhtc.client import local

    got = {}
    def first():
        got["thread"] = remote_map(abs, [-1, -2, -3], progress=False)
    t = threading.Thread(target=first)
    t.start(); t.join()
    time.sleep(1.0)                      # the starting thread is gone; its children must live on
    cluster = local.default_cluster()
    pids = [p.pid for p in cluster.procs] + [cluster.embedded.proc.pid]
    print("PIDS", *pids, flush=True)
    print("THREAD", got["thread"], flush=True)
    print("MAIN", remote_map(abs, [-4, -5], progress=False), flush=True)
    cluster.close()
""")


def test_default_cluster_outlives_the_thread_that_started_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RHTC_")}
    env["RHTC_CONFIG"] = str(tmp_path / "no-such-config.json")     # nothing configured: local default
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    pids = [int(p) for p in lines.get("PIDS", "").split()]
    try:
        assert proc.returncode == 0, err[-3000:]
        assert lines["THREAD"] == "[1, 2, 3]"
        assert lines["MAIN"] == "[4, 5]"
    finally:
        for pid in pids:                 # the script closed them; make sure, by pid
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
