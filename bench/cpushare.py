"""Where a client's CPU goes during a map, by sampling: a thread looks at the main
thread's Python stack every few milliseconds and charges the main thread's CPU time
spent since the last look (its own CPU clock, ``pthread_getcpuclockid``) to what the
stack is doing: verifying signatures, decoding results, combining them (the
reduction), talking to Redis (reading results off the socket, waiting), or the rest
(the bookkeeping: task states, the ledger, upkeep). No profiler hooks, so the client
runs at its normal speed; the figures are samples, good to a few percent.

    >>> with CpuShare() as share:
    ...     _ = sum(i * i for i in range(200_000))
    >>> set(share.seconds) == set(CATEGORIES) and share.process_cpu > 0
    True
"""
from __future__ import annotations

import sys
import threading
import time

#: what the client's time is charged to, checked from the innermost frame outwards:
#: (category, a fragment of the file's path, the function's names or None for any)
RULES = (
    ("verify", "broker/wire/protocol.py", {"verify", "unpack_result"}),
    ("decode", "broker/wire/protocol.py", {"loads"}),
    ("decode", "broker/wire/messages.py", {"decode_result", "decode"}),
    ("combine", "client/reduce.py", None),
    ("redis I/O", "/redis/", None),
)
CATEGORIES = ("verify", "decode", "combine", "redis I/O", "bookkeeping")


def _category(frame) -> str:
    while frame is not None:
        code = frame.f_code
        for name, fragment, functions in RULES:
            if fragment in code.co_filename and (functions is None or code.co_name in functions):
                return name
        frame = frame.f_back
    return "bookkeeping"


class CpuShare:
    """Samples the calling thread (every ``interval`` s) while the ``with`` block runs.
    Afterwards: ``seconds`` (main thread CPU per category), ``main_cpu``, ``process_cpu``
    (the whole process, this sampler excluded) and ``wall``."""

    def __init__(self, interval: float = 0.002):
        self.interval = interval
        self.seconds = dict.fromkeys(CATEGORIES, 0.0)
        self.main_cpu = self.process_cpu = self.wall = 0.0
        self._stop = threading.Event()
        self._own_cpu = 0.0

    def __enter__(self) -> "CpuShare":
        self._ident = threading.get_ident()
        self._clock = time.pthread_getcpuclockid(self._ident)
        self._t0, self._p0 = time.perf_counter(), time.process_time()
        self._m0 = time.clock_gettime(self._clock)
        self._thread = threading.Thread(target=self._sample, name="cpushare", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        last = time.clock_gettime(self._clock)
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self._ident)
            now = time.clock_gettime(self._clock)
            self.seconds[_category(frame)] += now - last
            last = now
        self._own_cpu = time.thread_time()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.wall = time.perf_counter() - self._t0
        self.main_cpu = time.clock_gettime(self._clock) - self._m0
        self.process_cpu = time.process_time() - self._p0 - self._own_cpu

    def shares(self) -> dict[str, float]:
        """Each category's part of the main thread's CPU (0..1)."""
        total = sum(self.seconds.values()) or 1.0
        return {k: v / total for k, v in self.seconds.items()}
