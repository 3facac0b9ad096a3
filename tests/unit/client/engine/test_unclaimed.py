"""Tasks stranded in the own queue of a worker that looks live but takes none of them
(client/engine/unclaimed.py): a queue that has not shrunk, whose owner finished nothing and
is idle (or beats no new heartbeat), for ``seconds``, is named once; any sign of service
(the queue shrank, a task finished, a busy worker's new heartbeat) starts the clock again;
an empty queue is never named. Forged and written-back heartbeats on real workers:
tests/scenarios/test_replayed_and_forged_frames.py."""
from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.broker.wire.messages import WorkerStatus
from rhtc.broker.wire.protocol import TaskRef
from rhtc.client.engine.unclaimed import UnclaimedWatch
from tests.helpers import examples

GHOST = WorkerStatus(name="ghost", host="h", pid=1, incarnation="i", key_fingerprint="f", t=5.0, queued=7)


def beat(w: WorkerStatus, **changes) -> WorkerStatus:
    return dataclasses.replace(w, **changes)


def test_a_queue_nobody_serves_is_named_after_the_seconds_and_then_watched_anew():
    watch = UnclaimedWatch(seconds=10)
    assert watch.stranded([GHOST], now=100.0) == []
    assert watch.stranded([GHOST], now=109.9) == []
    assert watch.stranded([GHOST], now=110.0) == ["ghost"]
    assert watch.stranded([GHOST], now=111.0) == []                # named once; watched from now
    assert watch.stranded([GHOST], now=121.0) == ["ghost"]


def test_any_sign_of_service_starts_the_clock_again():
    busy = beat(GHOST, task=TaskRef("0123456789abcdef", 0))
    for served in (beat(GHOST, queued=6), beat(GHOST, tasks_done=1), beat(busy, t=6.0)):
        watch = UnclaimedWatch(seconds=10)
        watch.stranded([busy if served.task else GHOST], now=100.0)
        assert watch.stranded([served], now=108.0) == []
        assert watch.stranded([served], now=117.0) == []           # 9 s since it moved
        assert watch.stranded([served], now=118.0) == [served.name]


def test_a_busy_worker_that_stops_beating_and_an_idle_one_that_beats_are_both_stranded():
    busy = beat(GHOST, task=TaskRef("0123456789abcdef", 0))
    for first, later in ((busy, busy), (GHOST, beat(GHOST, t=50.0))):     # an idle beat is no service
        watch = UnclaimedWatch(seconds=10)
        watch.stranded([first], now=0.0)
        assert watch.stranded([later], now=10.0) == ["ghost"]


def test_an_empty_queue_or_a_worker_gone_from_the_live_list_is_forgotten():
    watch = UnclaimedWatch(seconds=10)
    watch.stranded([GHOST], now=0.0)
    assert watch.stranded([beat(GHOST, queued=0)], now=20.0) == []
    assert watch.stranded([GHOST], now=25.0) == []                 # watched from 25 on
    watch.stranded([], now=26.0)
    assert watch.stranded([GHOST], now=30.0) == []


@settings(settings.get_profile("default"), max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.floats(0.0, 4.0), st.integers(0, 3), st.booleans()), max_size=30))
def test_a_worker_is_named_only_after_seconds_without_service(steps):
    """Beats at any pace, the queue at any length, a task finished or not: the worker is named
    exactly when its queue was never empty, never shorter than when the clock started, and it
    finished nothing, for ``seconds`` (a queue that grew and shrank back has not shrunk)."""
    watch, now, done, clock = UnclaimedWatch(seconds=5), 0.0, 0, None     # clock: (since, queued)
    for dt, queued, finished in steps:
        now, done = now + dt, done + finished
        named = watch.stranded([beat(GHOST, queued=queued, tasks_done=done)], now=now)
        if not queued:
            clock = None
        elif clock is None or queued < clock[1] or finished:
            clock = (now, queued)
        expected = clock is not None and now - clock[0] >= 5
        assert named == (["ghost"] if expected else [])
        if expected:
            clock = None
