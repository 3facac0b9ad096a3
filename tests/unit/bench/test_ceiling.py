"""The ceiling on paper (bench/ceiling.py): the number of workers at which the broker or the
client tops out, from the costs fitted to ``bench scale``'s cells, says "cannot tell" rather
than fit what its cells do not determine. Cells of one result size and one task duration
once printed "0 us per worker-second" and a 43-worker ceiling. Pure: the quick tier.

Expected figures are worked out by hand in each test."""
from __future__ import annotations

import random

import pytest

from rhtc.bench.ceiling import ceiling_lines, fit_costs


#: the costs the synthetic cells are made of (s of CPU): per worker-second, per task, per byte
BROKER = (275e-6, 378e-6, 0.99e-9)
CLIENT = (311e-6, 354e-6, 2.67e-9)


def cells(workers, durations, sizes, noise=0.03, seed=1, waves=3, broker=BROKER, client=CLIENT) -> dict:
    """``bench scale``'s JSON for a grid of cells whose CPU follows the model, with noise."""
    rng = random.Random(seed)
    out = []
    for w in workers:
        for d in durations:
            for s in sizes:
                tasks, wall = w * waves, d * waves / 0.9 + 1.0
                cpu = [(h * w * wall + tasks * (a + b * s)) * rng.gauss(1, noise) for h, a, b in (broker, client)]
                out.append({"workers": w, "seconds": d, "bytes": s, "tasks": tasks, "wall_s": wall,
                            "redis_cpu_us_per_task": cpu[0] / tasks * 1e6,
                            "client_cpu_us_per_task": cpu[1] / tasks * 1e6})
    return {"cells": out}


def rows(lines: list[str]) -> dict[tuple[str, str], list[str]]:
    """The ceiling table: {(task, result): [broker, client]}."""
    out = {}
    for line in lines[lines.index(next(x for x in lines if "tops out at" in x)) + 1:]:
        task, size, unit, rest = line.split(None, 3)
        out[(task, f"{size} {unit}")] = [x.strip() for x in rest.replace("cannot tell", "cannot_tell").split()]
    return out


def test_the_ceiling_cannot_tell_a_cost_per_mb_from_cells_of_one_size():
    lines = ceiling_lines(cells([100, 300, 1000], [1, 10], [10_000]))
    text = "\n".join(lines)
    assert "cannot tell [1] ms per MB" in text
    assert "every cell returned 10 kB" in text and "--sizes 10kB,1MB" in text
    table = rows(lines)
    assert table[("1s", "1 MB")] == table[("60s", "8 MB")] == ["cannot_tell", "cannot_tell"]
    # for 10 kB results the cells do tell: 1 / (275e-6 + (378e-6 + 0.99e-9 * 1e4) / 1) = 1507 workers
    assert int(table[("1s", "10 kB")][0].replace(",", "")) == pytest.approx(1507, rel=0.1)


def test_the_ceiling_of_cells_of_one_size_and_one_duration_is_cannot_tell_throughout():
    """The case seen: only 10 kB cells of 1 s tasks printed "0 us per worker-second" and a
    43-worker ceiling."""
    lines = ceiling_lines(cells([100, 300, 1000], [1], [10_000]))
    text = "\n".join(lines)
    assert "0 us per worker-second" not in text and "cannot tell [1] us per worker-second" in text
    assert "every cell ran 1 s tasks" in text and "--seconds 1,10" in text
    assert all(v == ["cannot_tell", "cannot_tell"] for v in rows(lines).values())


def test_a_cost_the_fit_cannot_tell_from_zero_is_refused_and_the_others_kept():
    # the client here costs nothing per worker-second: the fit cannot tell it from zero
    lines = ceiling_lines(cells([100, 300, 1000], [1, 10], [10_000, 1_000_000], noise=0.05,
                                client=(0.0, 354e-6, 2.67e-9)))
    broker, client = fit_costs(cells([100, 300, 1000], [1, 10], [10_000, 1_000_000], noise=0.05,
                                     client=(0.0, 354e-6, 2.67e-9)))
    assert set(broker.values) == {"worker_second", "task", "byte"}
    assert "worker_second" in client.unknown and set(client.values) == {"task", "byte"}
    assert "of zero" in client.unknown["worker_second"] or "not above zero" in client.unknown["worker_second"]
    assert "--seconds 10,60" in client.unknown["worker_second"]
    assert all(v[1] == "cannot_tell" and v[0] != "cannot_tell" for v in rows(lines).values())


def test_too_few_cells_leave_no_spread_to_judge_the_fit_by():
    broker, _ = fit_costs(cells([100], [1, 10], [10_000], noise=0.0))     # 2 cells, 2 costs
    assert broker.values == {} and "2 cells for 2 costs" in broker.unknown["task"]


def test_cells_of_two_sizes_and_two_durations_determine_every_cost():
    broker, client = fit_costs(cells([100, 300, 1000], [1, 10], [10_000, 1_000_000]))
    for costs, truth in ((broker, BROKER), (client, CLIENT)):
        assert costs.unknown == {}
        for term, want in zip(("worker_second", "task", "byte"), truth):
            assert costs.values[term] == pytest.approx(want, rel=0.25), (costs.name, term)
            assert abs(costs.values[term] - want) < 4 * costs.errors[term], (costs.name, term)
    lines = ceiling_lines(cells([100, 300, 1000], [1, 10], [10_000, 1_000_000]))
    assert "cannot tell" not in "\n".join(lines)
    # 10 s tasks of 1 MB: the client is one core busy at 1 / (311e-6 + (354e-6 + 2.67e-3) / 10) = 1,653 workers
    assert int(rows(lines)[("10s", "1 MB")][1].replace(",", "")) == pytest.approx(1653, rel=0.1)
