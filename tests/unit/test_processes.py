"""Stopping the child processes we started (rhtc/processes.py), on real children (a process
each: ``heavy``): every one gets SIGTERM before any is waited for, within one grace period
for all; one that ignores SIGTERM is killed when the grace is over; a stopped (SIGSTOPped)
one is continued so that it acts on its SIGTERM; one that already ended, or a ``None`` in
place of a process, is passed over; none outlives the call."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from rhtc.processes import stop_processes

pytestmark = pytest.mark.heavy

SLEEP = ["sleep", "60"]
DEAF = ["sh", "-c", "trap '' TERM; echo ready; exec sleep 60"]    # SIGTERM ignored (inherited through exec)
HANDLES_TERM = ("import signal, sys, time\n"
                "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n"
                "print('ready', flush=True)\n"
                "time.sleep(60)")


def started(*argvs):
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE if argv is DEAF else None, text=True) for argv in argvs]
    for p in procs:
        if p.stdout:
            assert p.stdout.readline() == "ready\n"        # the shell set its trap
            p.stdout.close()
    return procs


def test_children_are_stopped_by_sigterm_together():
    procs = started(SLEEP, SLEEP, SLEEP)
    t0 = time.monotonic()
    stop_processes(procs, grace=30)
    assert [p.returncode for p in procs] == [-signal.SIGTERM] * 3
    assert time.monotonic() - t0 < 10


def test_one_that_ignores_sigterm_is_killed_after_one_grace_for_all():
    procs = started(DEAF, DEAF, DEAF, DEAF, SLEEP)
    t0 = time.monotonic()
    stop_processes(procs, grace=2.0)
    took = time.monotonic() - t0
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 4 + [-signal.SIGTERM]
    assert 2.0 <= took < 6.0                               # one grace in all (one each: 8 s)


def test_a_stopped_child_is_continued_and_acts_on_its_sigterm():
    """A child with its own SIGTERM handler (a worker, redis-server) runs it only once
    continued: stopped, it would sit out the grace and be killed."""
    p = subprocess.Popen([sys.executable, "-c", HANDLES_TERM], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGSTOP)
    stop_processes([p], grace=10)
    p.stdout.close()
    assert p.returncode == 3                                # its handler ran


def test_an_ended_child_and_none_are_passed_over():
    [done] = started(["true"])
    done.wait()
    [alive] = started(SLEEP)
    stop_processes([done, None, alive], grace=30)
    assert done.returncode == 0 and alive.returncode == -signal.SIGTERM
