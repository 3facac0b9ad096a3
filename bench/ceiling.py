"""Where one Redis and one client top out, on paper, from what ``bench scale`` measured.

The model: each live worker costs the broker ``h`` seconds of CPU per second (heartbeat,
reaping, lease checks, its idle blocking pop: the broker's CPU share with every worker
idle, per worker); each task costs the broker ``a + b * size`` and the client
``c + d * size`` (fitted over the measured cells by least squares, the broker's after
taking the heartbeats of the map's duration away). With W workers running tasks of D
seconds that return S bytes, the broker is busy ``W * h + W / D * (a + b * S)`` of a core
and the client ``W / D * (c + d * S)``; each tops out at one core.

    >>> costs = Costs(heartbeat=1e-4, broker_task=2e-4, broker_byte=1e-9, client_task=1e-4, client_byte=5e-9)
    >>> w_broker, w_client = max_workers(costs, seconds=10.0, nbytes=1_000_000)
    >>> round(w_broker), round(w_client)
    (4545, 1961)
"""
from __future__ import annotations

import dataclasses
import statistics

import numpy as np


@dataclasses.dataclass(frozen=True)
class Costs:
    """Seconds of CPU: per worker per second, per task and per result byte."""

    heartbeat: float
    broker_task: float
    broker_byte: float
    client_task: float
    client_byte: float


def _fit(sizes: list[float], costs: list[float]) -> tuple[float, float]:
    """(intercept, slope) of cost against size; a slope of 0 when only one size ran."""
    if len(set(sizes)) < 2:
        return float(statistics.median(costs)), 0.0
    slope, intercept = np.polyfit(np.array(sizes, dtype=float), np.array(costs, dtype=float), 1)
    return max(0.0, float(intercept)), max(0.0, float(slope))


def fit_costs(result: dict) -> Costs:
    """The model's costs from ``bench scale``'s figures (its JSON)."""
    pools = {p["workers"]: p for p in result["pools"] if "register_s" in p}
    heartbeat = statistics.median(p["redis_idle_share"] / p["workers"] for p in pools.values())
    cells = [c for c in result["cells"] if "tasks" in c]
    sizes = [c["bytes"] for c in cells]
    broker = [c["redis_cpu_us_per_task"] / 1e6 - heartbeat * c["wall_s"] * c["workers"] / c["tasks"]
              for c in cells]
    client = [c["client_cpu_us_per_task"] / 1e6 for c in cells]
    a, b = _fit(sizes, broker)
    c, d = _fit(sizes, client)
    return Costs(heartbeat, a, b, c, d)


def max_workers(costs: Costs, seconds: float, nbytes: int) -> tuple[float, float]:
    """(workers at which the broker is one core busy, ... the client is) for tasks of
    ``seconds`` returning ``nbytes``."""
    per_task_broker = costs.broker_task + costs.broker_byte * nbytes
    per_task_client = costs.client_task + costs.client_byte * nbytes
    return 1.0 / (costs.heartbeat + per_task_broker / seconds), seconds / per_task_client


def ceiling_lines(result: dict, durations=(1.0, 10.0, 60.0), sizes=(10_000, 1_000_000, 8_000_000)) -> list[str]:
    """The costs and the table of ceilings, as printed by ``bench scale``."""
    k = fit_costs(result)
    lines = [f"costs fitted: broker {k.heartbeat * 1e6:.1f} us per worker-second (idle), "
             f"{k.broker_task * 1e6:.0f} us per task + {k.broker_byte * 1e9:.2f} ms per MB; client "
             f"{k.client_task * 1e6:.0f} us per task + {k.client_byte * 1e9:.2f} ms per MB",
             f"{'task':>6} {'result':>8} {'broker tops out at':>19} {'client tops out at':>19}  (workers)"]
    for d in durations:
        for s in sizes:
            wb, wc = max_workers(k, d, s)
            size = f"{s / 1e6:g} MB" if s >= 1e6 else f"{s / 1e3:g} kB"
            lines.append(f"{d:>5g}s {size:>8} {wb:>19,.0f} {wc:>19,.0f}")
    return lines
