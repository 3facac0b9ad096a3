"""``bench chaos``'s day: many short maps from one client, with the world changing
between them as it does over an analyst's day (issue 16).

Between two maps, in turn: every connection to the broker is killed (``CLIENT KILL``:
the client's, the supervisors', the task processes'; what a NAT that drops idle
connections or a broker restart does), or the ROOT file the maps read is rewritten in
place (same path, new content, as a re-run skim does) and chunked again. During a map,
the broker refuses every write for a few seconds (``maxmemory`` reached), longer than a
lease, while the workers run their tasks. Every map's results are checked against the
numbers of the file as it is now: correct, in order, each delivered exactly once; and no
attempt may be counted against a task (nothing died).

    (not run by the tests: minutes of faults; tests/test_day_*.py run it)
    >>> with ChaosPool(4, 2.0) as pool:                         # doctest: +SKIP
    ...     run_day(pool, maps=6, seed=1).ok
    True
"""
from __future__ import annotations

import collections
import dataclasses
import os
import random
import time

import numpy as np

from .chaospool import ChaosPool

DAY_FAULTS = ("connection kill", "broker OOM window", "file rewritten")
TREE, BRANCH = "Events", "x"


def day_task(arg):
    """The day's function: ``(chunk, hold)`` -> (first entry, entries read, sum of x)."""
    chunk, hold = arg
    if hold:
        time.sleep(hold)
    x = chunk.arrays([BRANCH], how=dict)[BRANCH]
    return chunk.entry_start, len(x), float(np.sum(x))


def write_version(path: str, version: int, rng: random.Random) -> np.ndarray:
    """Write (in place) version ``version`` of the day's file: a different number of
    entries and different values each time. Returns its ``x``."""
    import uproot
    n = rng.randrange(2_000, 6_000)
    x = np.arange(n, dtype=np.float64) * (version + 1) + rng.random()
    with uproot.recreate(path) as f:
        f[TREE] = {BRANCH: x}
    return x


def expected(chunks, x: np.ndarray) -> list[tuple[int, int, float]]:
    return [(c.entry_start, c.num_entries, float(np.sum(x[c.entry_start:c.entry_stop]))) for c in chunks]


@dataclasses.dataclass
class DayResult:
    """What a day of maps did, and what was checked."""

    seed: int
    maps: int = 0
    tasks: int = 0
    correct: int = 0
    delivered: int = 0
    seconds: float = 0.0
    faults: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    stale_maps: int = 0             # maps that returned a rewritten file's old numbers
    attempts_counted: int = 0       # attempts counted against tasks (nothing died: must be 0)
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.correct == self.tasks == self.delivered


def run_day(pool: ChaosPool, maps: int = 12, seed: int = 0, oom_seconds: float = 7.0,
            faults: tuple[str, ...] = DAY_FAULTS, step: int = 500, timeout: float = 120.0) -> DayResult:
    """Run ``maps`` short maps over one ROOT file on ``pool``; between them the ``faults``
    (of :data:`DAY_FAULTS`) in turn; an OOM window of ``oom_seconds`` falls inside the
    next map instead, while its tasks run."""
    unknown = set(faults) - set(DAY_FAULTS)
    if unknown or not faults:
        raise ValueError(f"faults must be some of {DAY_FAULTS}, not {sorted(unknown) or 'none'}")
    from ..client import RemoteError, make_chunks, submit
    rng = random.Random(seed)
    result = DayResult(seed)
    path = os.path.join(pool.log_dir, f"day-{seed}.root")
    version = 0
    x = write_version(path, version, rng)
    chunks = make_chunks(path, tree=TREE, step=step)
    t0 = time.monotonic()
    pending = None                                    # the fault that comes before this map
    old_wants: list[list] = []                       # the numbers of the file's earlier versions
    for k in range(maps):
        oom = pending == "broker OOM window"
        hold = 0.5 if oom else 0.0                    # the window falls while tasks run
        h = submit(day_task, [(c, hold) for c in chunks], broker=pool.config, errors="return",
                   label=f"day-{k}", stragglers=None)
        if oom:
            pool.broker.refuse_writes()
            try:
                time.sleep(oom_seconds)
            finally:
                pool.broker.refuse_writes(False)
            result.faults[pending] += 1
        try:
            values = h.wait(timeout=timeout)
        except TimeoutError as err:
            values = None
            result.problems.append(f"map {k} after {pending or 'no fault'}: {err}")
            h.cancel()
        result.maps += 1
        result.tasks += len(chunks)
        result.delivered += h.progress()[0]
        # (the map's keys are deleted with the client's next map: still readable here)
        counted = pool.storage.maps.attempt_histories(h.map_id)
        if counted:
            result.attempts_counted += len(counted)
            result.problems.append(f"map {k} after {pending or 'no fault'}: attempts counted against "
                                   f"{len(counted)} task(s) although nothing died: "
                                   + "; ".join(f"task {i}: {v.strip()}" for i, v in list(counted.items())[:3]))
        want = expected(chunks, x)
        if values is not None:
            good = sum(v == w for v, w in zip(values, want))
            result.correct += good
            if good < len(want):
                bad = next((i, v) for i, (v, w) in enumerate(zip(values, want)) if v != w)
                kind = "failed" if isinstance(bad[1], RemoteError) else "wrong"
                result.problems.append(f"map {k} after {pending or 'no fault'}: {len(want) - good} of "
                                       f"{len(want)} results {kind}, e.g. task {bad[0]}: {bad[1]!s:.300}")
                if any(v == w for old in old_wants for v, w in zip(values, old)):
                    result.stale_maps += 1
        if h.progress()[0] != len(chunks):
            result.problems.append(f"map {k}: {h.progress()[0]} results delivered for {len(chunks)} tasks")
        # the fault before the next map
        pending = faults[k % len(faults)] if k + 1 < maps else None
        if pending == "connection kill":
            pool.broker.kill_connections()
            result.faults[pending] += 1
        elif pending == "file rewritten":
            old_wants.append(want)
            version += 1
            x = write_version(path, version, rng)
            chunks = make_chunks(path, tree=TREE, step=step)
            result.faults[pending] += 1
    result.seconds = time.monotonic() - t0
    return result


def describe_day(r: DayResult) -> list[str]:
    """The lines ``bench chaos`` prints for a day."""
    return [f"day: {r.maps} maps in {r.seconds:.1f} s (seed {r.seed}), faults between maps: "
            + ", ".join(f"{k} {r.faults[k]}" for k in DAY_FAULTS),
            f"day results checked: {r.correct}/{r.tasks} correct and in order, {r.delivered} delivered "
            f"for {r.tasks} tasks (exactly once); attempts counted against tasks: {r.attempts_counted}; "
            f"maps that read a rewritten file stale: {r.stale_maps}"]
