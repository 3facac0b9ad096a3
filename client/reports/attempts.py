"""Failed attempts of a map's tasks, for the run record and the timeline.

A task's own row in the record (:class:`~client.reports.rows.TaskRecord`) is how it ended; the
attempts before that are kept here: runs whose function raised and that were retried
(``outcome="retried"``, with the back-off that followed), and runs lost with the process
that ran them (``outcome="lost"``: a task process that died and was restarted, a worker
that stopped heartbeating). A worker was busy during each of them.

    >>> a = AttemptRecord.from_meta({"index": 3, "worker": "w1", "start": 1.0, "stop": 2.5,
    ...                              "error": "OSError: flaky", "outcome": "retried", "backoff": 1.0})
    >>> a.duration, a.timed, AttemptRecord.from_dict(a.to_dict()) == a
    (1.5, True, True)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

#: What ended an attempt, as the record and the timeline name it.
OUTCOMES = {"retried": "failed, retried", "lost": "lost with its process"}


@dataclasses.dataclass
class AttemptRecord:
    """One failed attempt of task ``index`` on ``worker`` (times NaN when not known)."""

    index: int
    worker: str
    start: float = math.nan
    stop: float = math.nan
    error: str | None = None
    outcome: str = "retried"
    backoff: float = 0.0

    @property
    def timed(self) -> bool:
        return not (math.isnan(self.start) or math.isnan(self.stop))

    @property
    def duration(self) -> float:
        return max(0.0, self.stop - self.start) if self.timed else 0.0

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> "AttemptRecord":
        """Build from the client's attempt row or saved JSON; unknown keys are ignored."""
        if meta.get("index") is None:
            raise ValueError(f"an attempt needs the index of its task (got keys {sorted(meta)})")
        outcome = str(meta.get("outcome") or "retried")
        if outcome not in OUTCOMES:
            raise ValueError(f"attempt of task {meta['index']}: outcome {outcome!r} is not one of {sorted(OUTCOMES)}")
        start, stop = meta.get("start"), meta.get("stop")
        return cls(index=int(meta["index"]), worker=str(meta.get("worker") or "?"),
                   start=math.nan if start is None else float(start),
                   stop=math.nan if stop is None else float(stop),
                   error=meta.get("error"), outcome=outcome, backoff=float(meta.get("backoff") or 0.0))

    from_dict = from_meta

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (unknown times as null)."""
        d = dataclasses.asdict(self)
        if not self.timed:
            d["start"] = d["stop"] = None
        return d

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AttemptRecord) and self.to_dict() == other.to_dict()
