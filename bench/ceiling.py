"""Where one Redis and one client top out, on paper, from what ``bench scale`` measured.

The model: each live worker costs the broker ``h`` and the client ``k`` seconds of CPU per
second (heartbeats, reaping and lease checks; the client's look at every worker each
upkeep tick), and each task costs the broker ``a + b * size`` and the client
``c + d * size`` (decode, verify, combine, bookkeeping). The six are fitted by least
squares over the measured cells (CPU seconds of the map against worker-seconds, tasks and
result bytes). With W workers running tasks of D seconds that return S bytes, the broker
is busy ``W * (h + (a + b * S) / D)`` of a core and the client ``W * (k + (c + d * S) / D)``;
each tops out at one core.

    >>> costs = Costs(heartbeat=1e-4, broker_task=2e-4, broker_byte=1e-9, client_task=1e-4,
    ...               client_byte=5e-9, client_worker=1e-5)
    >>> w_broker, w_client = max_workers(costs, seconds=10.0, nbytes=1_000_000)
    >>> round(w_broker), round(w_client)
    (4545, 1923)
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Costs:
    """Seconds of CPU: per worker per second, per task and per result byte."""

    heartbeat: float          # the broker, per worker-second
    broker_task: float
    broker_byte: float
    client_task: float
    client_byte: float
    client_worker: float = 0.0    # the client, per worker-second


def _fit(rows: list[tuple[float, float, float]], totals: list[float]) -> list[float]:
    """Non-negative coefficients of worker-seconds, tasks and bytes that best give ``totals``."""
    a = np.array(rows, dtype=float)
    y = np.array(totals, dtype=float)
    keep = [j for j in range(a.shape[1]) if a[:, j].any()]
    coef = np.zeros(a.shape[1])
    while keep:
        got = np.linalg.lstsq(a[:, keep], y, rcond=None)[0]
        if (got >= 0).all():
            coef[keep] = got
            break
        keep.pop(int(np.argmin(got)))        # a negative cost: fit without that term
    return [float(x) for x in coef]


def fit_costs(result: dict) -> Costs:
    """The model's costs from ``bench scale``'s figures (its JSON)."""
    cells = [c for c in result["cells"] if "tasks" in c]
    rows = [(c["workers"] * c["wall_s"], c["tasks"], c["tasks"] * c["bytes"]) for c in cells]
    h, a, b = _fit(rows, [c["redis_cpu_us_per_task"] * c["tasks"] / 1e6 for c in cells])
    k, c_, d = _fit(rows, [c["client_cpu_us_per_task"] * c["tasks"] / 1e6 for c in cells])
    return Costs(h, a, b, c_, d, k)


def max_workers(costs: Costs, seconds: float, nbytes: int) -> tuple[float, float]:
    """(workers at which the broker is one core busy, ... the client is) for tasks of
    ``seconds`` returning ``nbytes``."""
    broker = costs.heartbeat + (costs.broker_task + costs.broker_byte * nbytes) / seconds
    client = costs.client_worker + (costs.client_task + costs.client_byte * nbytes) / seconds
    return 1.0 / broker if broker else float("inf"), 1.0 / client if client else float("inf")


def ceiling_lines(result: dict, durations=(1.0, 10.0, 60.0), sizes=(10_000, 1_000_000, 8_000_000)) -> list[str]:
    """The costs and the table of ceilings, as printed by ``bench scale``."""
    k = fit_costs(result)
    lines = [f"costs fitted: broker {k.heartbeat * 1e6:.0f} us per worker-second + {k.broker_task * 1e6:.0f} us "
             f"per task + {k.broker_byte * 1e9:.2f} ms per MB; client {k.client_worker * 1e6:.0f} us per "
             f"worker-second + {k.client_task * 1e6:.0f} us per task + {k.client_byte * 1e9:.2f} ms per MB",
             f"{'task':>6} {'result':>8} {'broker tops out at':>19} {'client tops out at':>19}  (workers)"]
    for d in durations:
        for s in sizes:
            wb, wc = max_workers(k, d, s)
            size = f"{s / 1e6:g} MB" if s >= 1e6 else f"{s / 1e3:g} kB"
            lines.append(f"{d:>5g}s {size:>8} {wb:>19,.0f} {wc:>19,.0f}")
    return lines
