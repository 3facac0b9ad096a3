"""The task functions of tests/helpers.py reach a process that cannot import ``tests`` (a
worker outside the checkout): they travel by value. A child interpreter unpickles one and
runs it."""
from __future__ import annotations

import pytest

import os
import subprocess
import sys

import cloudpickle

from tests.helpers import square


@pytest.mark.heavy
def test_the_task_functions_travel_by_value(tmp_path):
    """A process whose path has no ``tests`` package (a worker outside the checkout) runs them."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    got = subprocess.run([sys.executable, "-c", "import pickle, sys; print(pickle.load(sys.stdin.buffer)(7))"],
                         input=cloudpickle.dumps(square), capture_output=True, cwd=tmp_path, env=env, timeout=60)
    assert got.returncode == 0, got.stderr.decode()
    assert got.stdout.decode().strip() == "49"
