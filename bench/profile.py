"""Where a task's cost goes, per task: the client's CPU, the workers' CPU, the broker's CPU,
the broker's commands and the messages it read and wrote (one-way trips through Redis),
read before and after a block of work (``bench overhead`` profiles its round trips, the
bare queue's and its big map with it, so that the next change that adds a trip or a
command shows up in one run).

* client: this process's CPU (``time.process_time``);
* workers: every process below this one except the broker (``redis-server``): the local
  cluster's supervisors and task processes, the bare queue's echo process;
* broker: INFO ``used_cpu_sys + used_cpu_user``; its commands: ``total_commands_processed``
  (a script's inner commands included); its messages: ``total_reads_processed +
  total_writes_processed`` (each a request read or a reply written: a one-way trip).

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     with Probe(s) as p:
    ...         for _ in range(100):
    ...             _ = s.ping()
    ...     got = p.per(100)
    >>> round(got["redis_commands"]), round(got["redis_messages"])
    (1, 2)
"""
from __future__ import annotations

import os
import time

import psutil

FIELDS = {"client_cpu_us": "client CPU (us)", "worker_cpu_us": "workers' CPU (us)",
          "redis_cpu_us": "Redis CPU (us)", "redis_commands": "Redis commands",
          "redis_messages": "one-way trips (Redis reads+writes)"}


def _workers_cpu() -> float:
    """CPU seconds of every process below this one, the broker left out."""
    total = 0.0
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if p.name().startswith("redis-server"):
                continue
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class Probe:
    """Counters over the ``with`` block; :meth:`per` divides them by its units of work."""

    def __init__(self, storage):
        self.storage = storage
        self.before: dict | None = None
        self.after: dict | None = None

    def _read(self) -> dict:
        info = self.storage.server_counters()
        return {"client": time.process_time(), "workers": _workers_cpu(),
                "redis": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
                "commands": int(info["total_commands_processed"]),
                "messages": int(info["total_reads_processed"]) + int(info["total_writes_processed"])}

    def __enter__(self) -> "Probe":
        self.before = self._read()
        return self

    def __exit__(self, *exc) -> None:
        self.after = self._read()

    def per(self, units: int) -> dict:
        """The block's costs per unit (the probe's own INFO calls taken out)."""
        b, a = self.before, self.after
        return {"client_cpu_us": (a["client"] - b["client"]) / units * 1e6,
                "worker_cpu_us": (a["workers"] - b["workers"]) / units * 1e6,
                "redis_cpu_us": (a["redis"] - b["redis"]) / units * 1e6,
                "redis_commands": (a["commands"] - b["commands"] - 1) / units,
                "redis_messages": (a["messages"] - b["messages"] - 2) / units}


def table(columns: dict[str, dict | None]) -> list[str]:
    """The profile as lines: one row per field, one column per profiled block."""
    width = max(14, *(len(c) + 2 for c in columns))
    lines = [f"{'per task':36}" + "".join(f"{c:>{width}}" for c in columns)]
    for key, label in FIELDS.items():
        cells = []
        for prof in columns.values():
            v = (prof or {}).get(key)
            cells.append(f"{'n/a':>{width}}" if v is None else f"{v:>{width}.1f}")
        lines.append(f"{label:36}" + "".join(cells))
    return lines
