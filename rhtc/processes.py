"""Stopping the child processes we started: SIGTERM, a grace period, then SIGKILL.

One helper for every owner of a child process (the embedded redis-server, the benchmark
servers and proxies, the test and benchmark worker pools), so each stops the same way:
a stopped (SIGSTOPped) process is continued first so it can act on the SIGTERM, all get
their SIGTERM before any is waited for, and none outlives the call.
"""
from __future__ import annotations

import signal
import subprocess
import time
from typing import Iterable


def stop_processes(procs: Iterable[subprocess.Popen], grace: float = 10.0) -> None:
    """Terminate ``procs`` (by pid), wait up to ``grace`` seconds in all, kill what is left.

    >>> import sys
    >>> p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    >>> stop_processes([p], grace=5); p.returncode == -signal.SIGTERM
    True
    """
    procs = [p for p in procs if p is not None]
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGCONT)
                p.terminate()
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
