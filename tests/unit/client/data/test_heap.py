"""Fewer garbage collections while an item runs (client/data/heap.py): inside the block the
young generation is collected every YOUNG_THRESHOLD new objects (so a growing heap is not
walked again and again), the older generations' thresholds unchanged; after it, the
thresholds are what they were, even if the block raised; a threshold already as high, or
the collector's threshold 0 (off), is left as it is; and one the task set for itself inside
the block is kept."""
from __future__ import annotations

import gc

import pytest

from rhtc.client.data.heap import YOUNG_THRESHOLD, fewer_collections


@pytest.fixture(autouse=True)
def thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_inside_the_block_young_collections_are_rarer_and_put_back_after():
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_fewer_young_collections_run_inside_the_block():
    gc.set_threshold(700, 10, 10)

    def young_collections() -> int:
        before = gc.get_stats()[0]["collections"]
        keep = [[i] for i in range(50_000)]          # 50k new containers
        del keep
        return gc.get_stats()[0]["collections"] - before
    outside = young_collections()
    with fewer_collections():
        inside = young_collections()
    assert inside * 5 < outside


def test_the_thresholds_come_back_when_the_item_raises():
    gc.set_threshold(700, 10, 10)
    with pytest.raises(ValueError):
        with fewer_collections():
            raise ValueError("the item failed")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("young", [0, YOUNG_THRESHOLD, 50_000])
def test_a_collector_off_or_already_as_high_is_left_as_it_is(young):
    gc.set_threshold(young, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (young, 10, 10)
    assert gc.get_threshold() == (young, 10, 10)


def test_a_threshold_the_task_set_for_itself_is_kept():
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        gc.set_threshold(2_000, 5, 5)
    assert gc.get_threshold() == (2_000, 5, 5)
