"""Multiprocessing inside a task. The analyst's script defines ``square``
in ``__main__`` and maps a function that hands it to ``multiprocessing.Pool(2).map``: that
works in the client's process, so it must work on the workers too (the task process's
``__main__`` is the worker's, where ``square`` cannot be found by name).

A real script run as ``__main__`` (a subprocess), a real redis-server, real workers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = '''
import json, multiprocessing, sys
from dataclasses import dataclass
from rhtc import remote_map


def square(x):
    return x * x


@dataclass
class Point:
    x: int


def norm(p):
    return p.x * p.x


def task(n):
    """Runs on a worker: a pool of two processes inside the task."""
    with multiprocessing.Pool(2) as pool:
        squares = pool.map(square, range(n))
        norms = pool.map(norm, [Point(i) for i in range(n)])
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        forkserver = pool.map(square, [n])
    return sum(squares), sum(norms), forkserver[0]


if __name__ == "__main__":
    local = task(4)                      # the same code in the client's process
    remote = remote_map(task, [3, 4, 5], progress=False, timeout=120)
    print(json.dumps({"local": local, "remote": remote}))
'''


@pytest.mark.timeout(180)
def test_a_task_maps_a_function_of_the_analysts_main_over_a_process_pool(broker, workers, tmp_path):
    script = tmp_path / "analysis.py"
    script.write_text(SCRIPT)
    names = workers.start(2)
    env = dict(os.environ, **broker.config.env())
    got = subprocess.run([sys.executable, str(script)], env=env, cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=150)
    logs = "".join(workers.log(n) for n in names)
    assert got.returncode == 0, f"{got.stderr[-3000:]}\nworker logs:\n{logs[-3000:]}"
    out = json.loads(got.stdout.strip().splitlines()[-1])
    assert out["local"] == [14, 14, 16]
    assert out["remote"] == [[5, 5, 9], [14, 14, 16], [30, 30, 25]]
    assert "left" not in logs, logs                # every pool was closed by the task itself
