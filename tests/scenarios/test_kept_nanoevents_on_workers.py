"""NanoEvents kept on the worker that holds a chunk, through real workers: ``RedisExecutor``
reruns reuse the kept events (a warm item builds none), a processor that changes its
events changes nothing for the next run, a file rewritten in place with its UUID is never
served its old events, and a worker whose cache cannot hold the events builds them every
time and answers the same.

Real parts: a real redis-server and worker processes (conftest), coffea, files written
here (tests/kits/coffea.py). In this process, through what a worker runs for an item:
tests/unit/client/data/test_coffea_events.py.
"""
from __future__ import annotations

import uuid as uuidlib

import numpy as np
import pytest

pytest.importorskip("coffea")
from coffea import processor  # noqa: E402

from tests.kits.coffea import (Meddler, MuonSums, assert_same_sums, iterative, nano, run,  # noqa: E402,F401  (nano: a fixture)
                             write_nano)
from tests.helpers import register_by_value  # noqa: E402

register_by_value(__name__)   # the processors travel by value


class Served(processor.ProcessorABC):
    """The muon sums, and how many items had the kept events before this one (0: built for
    this item)."""

    def process(self, events):
        out = MuonSums().process(events)
        out["served before"] = events.attrs["@events_factory"].kept.items_served - 1
        return out

    def postprocess(self, accumulator):
        return accumulator


def _ours(broker, **options):
    from rhtc.coffea import RedisExecutor
    return RedisExecutor(broker=broker.config, status=False, stragglers=None, **options)


def test_on_a_worker_reruns_reuse_the_kept_events_and_a_meddler_changes_nothing(broker, workers, tmp_path):
    path, same = str(tmp_path / "skim.root"), uuidlib.uuid4()
    write_nano(path, 1.0, same)
    fileset = {"skim": [path]}
    workers.start(1)
    ours = _ours(broker)
    cold, warm = run(ours, fileset, make=Served), run(ours, fileset, make=Served)
    assert (cold["served before"], warm["served before"]) == (0, 3), "a warm item built its events again"
    for what, got in (("cold", cold), ("warm", warm)):
        assert_same_sums(got, iterative(fileset), what)
    want = iterative(fileset, make=Meddler)
    for i in range(2):
        got = run(ours, fileset, make=Meddler)
        assert got["found changed"] == {"field": 0, "muon field": 0, "metadata": 0, "attrs": 0}, f"run {i}"
        assert got["own"] == {"events() is events": 3, "file handle": 3, "schema version": 3}, f"run {i}"
        np.testing.assert_allclose(got["doubled"], want["doubled"], rtol=1e-9)
    write_nano(path, 2.0, same)                       # rewritten in place, same UUID: same items
    after = run(ours, fileset, make=Served)
    assert after["served before"] == 0, "the old file's events were served"
    np.testing.assert_allclose(after["pt"], 2 * cold["pt"], rtol=1e-6)
    assert_same_sums(after, iterative(fileset), "after the rewrite")


def test_a_worker_whose_cache_cannot_hold_the_events_builds_them_and_answers_the_same(broker, workers, nano):
    fileset = {"nano": [nano]}
    workers.start(1, extra=("--cache-size", "20kB"))
    ours = _ours(broker)
    cold, warm = run(ours, fileset, make=Served), run(ours, fileset, make=Served)
    assert (cold["served before"], warm["served before"]) == (0, 0), "kept beyond the cache's cap"
    for what, got in (("cold", cold), ("warm", warm)):
        assert_same_sums(got, iterative(fileset), what)
