"""Other work on the machine, on purpose: ``bench scale --busy N`` keeps N processes
spinning at an ordinary priority while it measures (a stand-in for another user's job, a
build, a test suite), so that what the bench's figures owe to the rest of the machine can
be shown side by side (``--cpu-group both``). They are stopped by their pids when the
bench ends, however it ends.

    >>> with busy_processes(0):
    ...     pass
"""
from __future__ import annotations

import contextlib
import multiprocessing
from typing import Iterator


def _spin() -> None:                     # pragma: no cover (runs in the child)
    while True:
        pass


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[int]]:
    """``n`` processes that spin until the block ends; yields their pids."""
    ctx = multiprocessing.get_context("spawn")        # (nothing of the bench's state in them)
    procs = [ctx.Process(target=_spin, name=f"rhtc-bench-busy-{i}", daemon=True) for i in range(n)]
    for p in procs:
        p.start()
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.join(10)
