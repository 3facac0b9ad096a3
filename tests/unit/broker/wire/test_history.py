"""The lines of a task's attempt history (broker/wire/history.py): a lost run's line is read
back as written (why, worker, start, stop), for any reason text and worker name a run can
have (a hypothesis round trip); a line without the run's times (a history the broker wrote
before it kept them, a reaper's note) still gives its reason and a worker (its first word).
What the run record and the timeline draw from them: tests/unit/client/reports/test_timeline.py."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.broker.wire.history import lost_run_line, parse_lost_run
from tests.helpers import examples

WHY = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40).map(str.strip)
WORKER = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=12) \
    .filter(lambda w: "]" not in w)
TIME = st.floats(0, 1e10, allow_nan=False).map(lambda t: round(t, 3))


@settings(settings.get_profile("default"), max_examples=examples(500), deadline=None, derandomize=True, database=None)
@given(WHY, WORKER, TIME, TIME)
def test_a_lost_run_is_read_back_as_written(why, worker, start, stop):
    assert parse_lost_run(lost_run_line(why, worker, start, stop)) == \
        {"why": why, "worker": worker, "start": start, "stop": stop}


def test_the_line_says_the_times_to_the_millisecond():
    assert lost_run_line("died with exit code 9", "w1", 10.0, 12.34567) == \
        "died with exit code 9 [worker w1 ran 10.000-12.346]"


def test_a_line_without_times_gives_its_reason_and_first_word():
    assert parse_lost_run("w2 stopped heartbeating at 12:00:01 ") == \
        {"why": "w2 stopped heartbeating at 12:00:01", "worker": "w2"}
    assert parse_lost_run("   ") == {"why": "", "worker": "?"}


def test_only_a_trailing_run_part_is_read_as_one():
    line = "[worker a ran 1.000-2.000] then more"
    assert parse_lost_run(line)["worker"] == "[worker" and "start" not in parse_lost_run(line)
