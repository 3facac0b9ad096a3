"""One machine-wide bench at a time: ``bench scale`` (and its curve) measure how a thousand
light workers, Redis and the client share this machine's cores. Two such benches at once
each measure the other: with a second 1,000-worker bench running, each worker's first task
came minutes after the map's start instead of a fraction of a second (docs/scale.md, "The
ramp on a shared machine"). So a second one waits for the first, and says so.

The lock is a name in Linux's abstract socket namespace: nothing on disk to clean up, and
it is released when its process ends however it ends. The processes a holder starts (the
sides of ``--against``) run under it; they do not take it again.

    >>> with one_at_a_time("rhtc-doctest-lock", say=print):
    ...     with one_at_a_time("rhtc-doctest-lock", say=print):    # (the same process tree)
    ...         pass
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Callable, Iterator

HELD = "RHTC_BENCH_EXCLUSIVE_HELD"      # set in the environment of the holder's children
POLL = 1.0                              # seconds between two tries while another bench runs


@contextlib.contextmanager
def one_at_a_time(name: str = "rhtc-bench-scale", say: Callable[[str], None] = print) -> Iterator[None]:
    """Hold the machine-wide lock ``name`` for the block, waiting (and saying so once) while
    another process holds it."""
    if os.environ.get(HELD) == name:
        yield
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    said = False
    try:
        while True:
            try:
                sock.bind("\0" + name)
                break
            except OSError:
                if not said:
                    say(f"another bench holds {name!r} on this machine (its light workers would share the cores "
                        "with ours, and neither's figures would mean anything): waiting for it to end; "
                        "Ctrl-C to give up")
                    said = True
                time.sleep(POLL)
        os.environ[HELD] = name
        try:
            yield
        finally:
            os.environ.pop(HELD, None)
    finally:
        sock.close()
