"""The lines of a task's attempt history (one per lost run: why, which worker, when), as
the broker keeps them and the client's ledger, run record and timeline read them back.
Imported from :mod:`broker.wire.messages` too."""
from __future__ import annotations

import re

_LOST_RUN = re.compile(r"\s*\[worker (?P<worker>\S+) ran (?P<start>[0-9.]+)-(?P<stop>[0-9.]+)\]\s*$")


def lost_run_line(why: str, worker: str, start: float, stop: float) -> str:
    """A line of a task's attempt history: why one run was lost, who ran it and when (the
    run record and the timeline draw it).

    >>> line = lost_run_line("died with exit code 9", "w1", 10.0, 12.5)
    >>> parse_lost_run(line)
    {'why': 'died with exit code 9', 'worker': 'w1', 'start': 10.0, 'stop': 12.5}
    >>> parse_lost_run("w2 stopped heartbeating at 12:00:01")["worker"]
    'w2'
    """
    return f"{why} [worker {worker} ran {start:.3f}-{stop:.3f}]"


def parse_lost_run(line: str) -> dict:
    """``why``, ``worker`` and, when the line says, ``start``/``stop`` of one lost run."""
    m = _LOST_RUN.search(line)
    if m:
        return {"why": line[:m.start()].strip(), "worker": m["worker"], "start": float(m["start"]),
                "stop": float(m["stop"])}
    first = line.split(" ", 1)[0] if line.strip() else ""
    return {"why": line.strip(), "worker": first or "?"}
