"""How a worker's processes wait for a broker that refuses or is away: doubling pauses up
to a cap, saying what they wait for (once per reason, then every ~30 s).

    >>> b = Backoff("worker w1", cap=0.2)
    >>> b.delay
    0.1
"""
from __future__ import annotations

import logging
import time

from ..broker.errors import BrokerOutOfMemory, BrokerRefused, ConnectionProblem

log = logging.getLogger("rhtc.worker")


class Backoff:
    """Waits after a broker error, doubling up to a cap, and says what it waits for
    (once per distinct reason and then every ~30 s)."""

    def __init__(self, who: str, cap: float = 5.0):
        self.who, self.cap, self.delay = who, cap, 0.1
        self._said, self._said_at = "", 0.0

    def wait(self, err: BaseException, url: str) -> None:
        """Say what we wait for (see :meth:`say`), sleep :attr:`delay`, double it up to the cap."""
        self.say(err, url, self.delay)
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.cap)

    def say(self, err: BaseException, url: str, delay: float) -> None:
        """Log what the broker error ``err`` makes us wait for, once per distinct reason and
        then every ~30 s (the task loop's state decides the ``delay``: :mod:`worker.loopstate`)."""
        if isinstance(err, BrokerOutOfMemory):
            what = "memory in the broker (it is at maxmemory; results are kept until it has room)"
        elif isinstance(err, BrokerRefused) and not isinstance(err, ConnectionProblem):
            what = f"the broker to accept our commands ({type(err).__name__}: {err})"
        else:
            what = f"the broker at {url} ({type(err).__name__}: {err})"
        if what != self._said or time.monotonic() - self._said_at > 30:
            log.warning("%s: waiting for %s; retrying in %.1f s", self.who, what, delay)
            self._said, self._said_at = what, time.monotonic()

    def ok(self) -> None:
        if self._said:
            log.warning("%s: the broker answers again", self.who)
        self.delay, self._said = 0.1, ""
