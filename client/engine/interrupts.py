"""Ctrl-C at any instant: the few steps that must not be cut in half are run with the
interrupt held back until they end.

A map's submission (the script that queues its tasks and, for a small map, the wait for
its first result in the same round trip) and its cancellation talk to Redis over a
connection that answers in order. Cut by a KeyboardInterrupt between sending and reading,
the connection would hold a reply the next command would take for its own, and a map
might be queued with nobody left to cancel it. Inside :func:`held_interrupt` a first
Ctrl-C is noted and raised as ``KeyboardInterrupt`` when the step ends (a second one is
raised at once, for a step that hangs); the caller then cancels the map.

    >>> with held_interrupt():
    ...     pass                       # a step that must not be cut in half
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


@contextlib.contextmanager
def held_interrupt() -> Iterator[None]:
    """Hold back SIGINT during the block; raise the KeyboardInterrupt after it.

    Only in the main thread and only when Python's own handler is installed (a notebook's
    or an application's own handler is left alone); elsewhere the block runs as is.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    caught: list[int] = []

    def note(signum, frame):
        if caught:                         # a second Ctrl-C: the user means it, now
            raise KeyboardInterrupt
        caught.append(signum)

    signal.signal(signal.SIGINT, note)
    try:
        yield
    except BaseException as err:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if caught and not isinstance(err, KeyboardInterrupt):
            raise KeyboardInterrupt from err
        raise
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt
