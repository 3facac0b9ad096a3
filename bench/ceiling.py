"""Where one Redis and one client top out, on paper, from what ``bench scale`` measured.

The model: each live worker costs the broker ``h`` and the client ``k`` seconds of CPU per
second (heartbeats, reaping and lease checks; the client's look at every worker each
upkeep tick), and each task costs the broker ``a + b * size`` and the client
``c + d * size`` (decode, verify, combine, bookkeeping). Each party's three costs are
fitted by least squares over the measured cells (CPU seconds of the map against
worker-seconds, tasks and result bytes). With W workers running tasks of D seconds that
return S bytes, the broker is busy ``W * (h + (a + b * S) / D)`` of a core and the client
``W * (k + (c + d * S) / D)``; each tops out at one core.

**It says "cannot tell" rather than print a number the cells do not determine:**

* a cost per MB needs cells of at least two result sizes: with one size S, a cell's bytes
  are its tasks times S, so the cost of S bytes is folded into the cost per task, and the
  ceilings are given for results of S only;
* a cost per worker-second apart from one per task needs cells of at least two task
  durations: a cell's worker-seconds per task is about its task's duration, so with one
  duration the two costs look alike, and neither is given;
* a cost is judged by its standard error, from the spread the fit leaves: it needs more
  cells than costs fitted, and must come out positive and at least twice its error (with
  only 10 kB cells the fit once printed "0 us per worker-second" and a 43-worker ceiling).

Each cost it cannot tell is named with why and which cells would tell it (the ``bench
scale`` options to add them), and so is each ceiling that needs it.

    >>> costs = [Costs("broker", {"worker_second": 1e-4, "task": 2e-4, "byte": 1e-9}),
    ...          Costs("client", {"worker_second": 1e-5, "task": 1e-4, "byte": 5e-9})]
    >>> [round(c.workers(seconds=10.0, nbytes=1_000_000)) for c in costs]
    [4545, 1923]
    >>> only_10kB = Costs("broker", {"worker_second": 1e-4, "task": 2.1e-4}, size=10_000)
    >>> round(only_10kB.workers(10.0, 10_000)), only_10kB.workers(10.0, 1_000_000)
    (8264, None)
"""
from __future__ import annotations

import dataclasses

import numpy as np

#: the costs of a party: what each multiplies, and how each is printed (unit, scale)
TERMS = {"worker_second": ("us per worker-second", 1e6), "task": ("us per task", 1e6), "byte": ("ms per MB", 1e9)}
#: a fitted cost counts when it is at least this many standard errors above zero
SIGNIFICANCE = 2.0


@dataclasses.dataclass(frozen=True)
class Costs:
    """One party's costs (seconds of CPU per worker-second, per task, per result byte) as
    the cells determine them: ``values`` has those they tell, ``errors`` one standard error
    of each, ``unknown`` why each other one cannot be told and which cells would tell it.
    ``size``: the one result size of every cell, when the cost per byte is unknown for that
    reason (the cost per task then includes that size's bytes)."""

    name: str
    values: dict[str, float]
    errors: dict[str, float] = dataclasses.field(default_factory=dict)
    unknown: dict[str, str] = dataclasses.field(default_factory=dict)
    size: int | None = None

    def workers(self, seconds: float, nbytes: int) -> float | None:
        """Workers at which this party is one core busy, for tasks of ``seconds`` that return
        ``nbytes``; None when the cells cannot tell."""
        h, a = self.values.get("worker_second"), self.values.get("task")
        if h is None or a is None:
            return None
        if "byte" in self.values:
            a += self.values["byte"] * nbytes
        elif nbytes != self.size:
            return None
        load = h + a / seconds
        return 1.0 / load if load > 0 else float("inf")


def size_text(n: float) -> str:
    """A result size as the bench writes it: 10 kB, 8 MB."""
    return f"{n / 1e6:g} MB" if n >= 1e6 else f"{n / 1e3:g} kB"


def _unfit(cells: list[dict]) -> tuple[dict[str, str], int | None]:
    """The costs these cells cannot determine whatever they measured, with why and which
    cells would; and their one result size if they have only one."""
    sizes = sorted({c["bytes"] for c in cells})
    durations = sorted({c["seconds"] for c in cells})
    unknown = {}
    if len(durations) < 2:
        d = durations[0]
        why = (f"every cell ran {d:g} s tasks, so a cost per worker-second and one per task look alike: "
               f"add cells of another task duration (--seconds {d:g},{10 if d < 10 else 1:g})")
        unknown["worker_second"] = unknown["task"] = why
    if len(sizes) < 2:
        s = sizes[0]
        unknown["byte"] = (f"every cell returned {size_text(s)}, so its bytes cost the same per task: add cells "
                           f"of another result size (--sizes {size_text(s).replace(' ', '')},"
                           f"{'1MB' if s < 1e6 else '10kB'}); ceilings for {size_text(s)} results only")
    return unknown, sizes[0] if len(sizes) == 1 else None


#: which cells would make a cost that came out negative or within its error stand out
NOT_TOLD = {"worker_second": "cells where the workers' seconds weigh more against their tasks: longer tasks "
                             "(--seconds 10,60) or more workers (--workers)",
            "task": "cells with more tasks per worker-second: shorter tasks (--seconds 0.2,1)",
            "byte": "cells with bigger results (--sizes 1MB,8MB)"}


def fit(name: str, cells: list[dict], totals: list[float]) -> Costs:
    """A party's :class:`Costs` from ``bench scale``'s cells and its CPU seconds in each."""
    unknown, size = _unfit(cells)
    columns = {"worker_second": [c["workers"] * c["wall_s"] for c in cells],
               "task": [float(c["tasks"]) for c in cells],
               "byte": [float(c["tasks"] * c["bytes"]) for c in cells]}
    # with one duration the cost per task absorbs the one per worker-second (neither is told,
    # the cost per MB still can be); with one size it absorbs that size's bytes (and is told)
    use = ["worker_second"] * ("worker_second" not in unknown) + ["task"] + ["byte"] * ("byte" not in unknown)
    told = [t for t in use if t not in unknown]
    if not told:
        return Costs(name, {}, {}, unknown, size)
    a = np.array([columns[t] for t in use], dtype=float).T
    y = np.array(totals, dtype=float)
    n, p = a.shape
    if n <= p:
        for t in told:
            unknown[t] = (f"{n} cells for {p} costs leave no spread to judge the fit by: add cells "
                          "(another worker count, --workers)")
        return Costs(name, {}, {}, unknown, size)
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    coef, _, rank, _ = np.linalg.lstsq(a / scale, y, rcond=None)
    if rank < p:
        for t in told:
            unknown[t] = ("the cells' worker-seconds, tasks and bytes move together: add cells of other sizes "
                          "and durations")
        return Costs(name, {}, {}, unknown, size)
    resid = y - (a / scale) @ coef
    cov = float(resid @ resid) / (n - p) * np.linalg.inv((a / scale).T @ (a / scale))
    values, errors = {}, {}
    for j, t in enumerate(use):
        if t not in told:
            continue
        value, error = coef[j] / scale[j], float(np.sqrt(max(cov[j, j], 0.0))) / scale[j]
        unit, k = TERMS[t]
        if value <= 0 or value < SIGNIFICANCE * error:
            got = "not above zero" if value <= 0 else f"within {SIGNIFICANCE:g} standard errors of zero"
            unknown[t] = (f"the fit gives {_plus_minus(value * k, error * k, 2 if t == 'byte' else 0)} {unit}, "
                          f"{got}: {NOT_TOLD[t]}")
        else:
            values[t], errors[t] = float(value), error
    return Costs(name, values, errors, unknown, size)


def fit_costs(result: dict) -> tuple[Costs, Costs]:
    """The broker's and the client's costs from ``bench scale``'s figures (its JSON)."""
    cells = [c for c in result["cells"] if "tasks" in c]
    return (fit("broker", cells, [c["redis_cpu_us_per_task"] * c["tasks"] / 1e6 for c in cells]),
            fit("client", cells, [c["client_cpu_us_per_task"] * c["tasks"] / 1e6 for c in cells]))


def _plus_minus(value: float, error: float, digits: int) -> str:
    """'291 ± 6': ``digits`` decimals, more if the error needs them to show at all."""
    while digits < 6 and round(error, digits) == 0 and error > 0:
        digits += 1
    return f"{value:.{digits}f} ± {error:.{digits}f}"


def _cost_text(costs: Costs, notes: list[str]) -> str:
    """'broker: 275 ± 12 us per worker-second + cannot tell [1] us per task + ...'."""
    parts = []
    for t, (unit, k) in TERMS.items():
        if t in costs.values:
            parts.append(_plus_minus(costs.values[t] * k, costs.errors[t] * k, 2 if t == "byte" else 0) + f" {unit}"
                         + (f" (with {size_text(costs.size)} results)" if t == "task" and costs.size else ""))
        else:
            if costs.unknown[t] not in notes:
                notes.append(costs.unknown[t])
            parts.append(f"cannot tell [{notes.index(costs.unknown[t]) + 1}] {unit}")
    return f"  {costs.name}: " + " + ".join(parts)


def ceiling_lines(result: dict, durations=(1.0, 10.0, 60.0), sizes=(10_000, 1_000_000, 8_000_000)) -> list[str]:
    """The costs and the table of ceilings, as printed by ``bench scale``.

    >>> cells = [{"workers": 100, "wall_s": 3.5, "tasks": 300, "seconds": 1.0, "bytes": 10_000,
    ...           "redis_cpu_us_per_task": 900 + k, "client_cpu_us_per_task": 800 - k} for k in range(3)]
    >>> print("\\n".join(ceiling_lines({"cells": cells}, durations=(1.0,), sizes=(10_000,))))
    costs fitted over 3 cells (± one standard error):
      broker: cannot tell [1] us per worker-second + cannot tell [1] us per task + cannot tell [2] ms per MB
      client: cannot tell [1] us per worker-second + cannot tell [1] us per task + cannot tell [2] ms per MB
      [1] every cell ran 1 s tasks, so a cost per worker-second and one per task look alike:
          add cells of another task duration (--seconds 1,10)
      [2] every cell returned 10 kB, so its bytes cost the same per task: add cells of another
          result size (--sizes 10kB,1MB); ceilings for 10 kB results only
      task   result  broker tops out at  client tops out at  (workers)
        1s    10 kB         cannot tell         cannot tell
    """
    broker, client = fit_costs(result)
    n = sum(1 for c in result["cells"] if "tasks" in c)
    notes: list[str] = []
    lines = [f"costs fitted over {n} cell{'s' if n != 1 else ''} (± one standard error):", _cost_text(broker, notes),
             _cost_text(client, notes), *[f"  [{i}] {note}" for i, note in enumerate(notes, 1)],
             f"{'task':>6} {'result':>8} {'broker tops out at':>19} {'client tops out at':>19}  (workers)"]
    for d in durations:
        for s in sizes:
            tops = [costs.workers(d, s) for costs in (broker, client)]
            lines.append(f"{d:>5g}s {size_text(s):>8} " + " ".join(
                f"{'cannot tell' if w is None else f'{w:,.0f}':>19}" for w in tops))
    return lines
