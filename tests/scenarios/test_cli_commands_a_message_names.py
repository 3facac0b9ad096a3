"""The ``rhtc`` command line, run: the help of each command runs, and ``rhtc pool stop`` of
a pool that does not exist points to a command that exists (it pointed to ``rhtc pool
status``, which is "No such command"). Real processes (``python -m rhtc.client.ops.cli``),
a real redis-server. Every hint in the sources, read without running anything:
tests/unit/client/ops/test_cli.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.kits.cli import HINT, check_hint


def test_rhtc_pool_stop_of_no_pool_points_to_a_command_that_exists(broker):
    env = dict(os.environ, **broker.config.env())
    done = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "pool", "stop", "nosuchpool"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    said = done.stderr + done.stdout
    named = [m.group(1) for m in HINT.finditer(said)]
    assert named, said
    for text in named:
        assert check_hint(text) is None, f"{said!r} points to `rhtc {text}`: {check_hint(text)}"
    assert "rhtc status" in said, said


@pytest.mark.heavy
@pytest.mark.parametrize("argv", [["pool", "--help"], ["submit", "--help"], ["status", "--help"]])
def test_the_help_of_each_command_runs(argv):
    done = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
