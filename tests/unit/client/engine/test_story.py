"""What a map remembers of its recent events to tell a task's story (client/engine/story.py):
the last ``events`` events and, among them, fetches as the indices they answered, never more
than ``indices`` indices in all (a million-task map's fetches once kept ~8 MB alive), the
oldest dropped first; and ``about(i)`` names, oldest first, the kept events that name task
``i``. A model of the bound, under hypothesis."""
from __future__ import annotations

import collections

from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.client.engine.events import Tick
from rhtc.client.engine.story import Story
from tests.helpers import examples


class Named:
    """An event that names task ``index``."""

    def __init__(self, index):
        self.index = index


SETTINGS = settings(settings.get_profile("default"), max_examples=examples(300), deadline=None, derandomize=True,
                    database=None)
STEP = st.one_of(st.integers(0, 9).map(Named), st.just(Tick(now=0.0)),
                 st.lists(st.integers(0, 9), max_size=6))


@SETTINGS
@given(events=st.integers(1, 6), indices=st.integers(0, 12), steps=st.lists(STEP, max_size=40))
def test_the_story_keeps_the_newest_events_within_both_bounds(events, indices, steps):
    story, kept = Story(events=events, indices=indices), collections.deque()
    for step in steps:
        size = len(step) if isinstance(step, list) else 0
        (story.remember_fetch if isinstance(step, list) else story.remember)(step)
        kept.append(step)                                 # the model: drop the oldest until both hold
        while len(kept) > 1 and (len(kept) > events or sum(len(k) for k in kept if isinstance(k, list)) > indices):
            kept.popleft()
        assert story.kept_indices == sum(len(k) for k in kept if isinstance(k, list))
        assert story.kept_indices <= max(indices, size)   # only a fetch alone may exceed it
    for i in range(10):
        want = ["Results" if isinstance(k, list) else "Named" for k in kept
                if (i in k if isinstance(k, list) else getattr(k, "index", None) == i)]
        assert story.about(i) == want


def test_a_fetch_names_each_task_it_answered_and_a_tick_none():
    story = Story()
    story.remember(Tick(now=1.0))
    story.remember(Named(3))
    story.remember_fetch(range(2, 5))
    assert story.about(3) == ["Named", "Results"] and story.about(2) == ["Results"] and story.about(7) == []


def test_the_indices_of_many_fetches_stay_bounded():
    story = Story(events=2000, indices=1000)
    for start in range(0, 100_000, 100):
        story.remember_fetch(range(start, start + 100))
    assert story.kept_indices == 1000
    assert story.about(99_999) == ["Results"] and story.about(98_999) == []
