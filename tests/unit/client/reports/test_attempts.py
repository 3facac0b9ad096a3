"""The failed attempts of a map's tasks (client/reports/attempts.py), as the run record and
the timeline keep them: built from the client's attempt rows or saved JSON (unknown keys
ignored, a missing index or an unknown outcome refused naming it), unknown times kept as NaN
and saved as null, and every record back as it was through its JSON (a hypothesis round trip).
The record and the timeline that draw them: tests/unit/client/reports/test_timeline.py and
tests/scenarios/test_every_attempt_is_on_the_record.py."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.client.reports.attempts import OUTCOMES, AttemptRecord
from tests.helpers import examples

TIMES = st.one_of(st.none(), st.floats(0, 1e10, allow_nan=False))


@settings(settings.get_profile("default"), max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(index=st.integers(0, 2 ** 31), worker=st.one_of(st.none(), st.text(min_size=1, max_size=8)),
       start=TIMES, stop=TIMES, error=st.one_of(st.none(), st.text(max_size=20)),
       outcome=st.sampled_from([None, *OUTCOMES]), backoff=st.one_of(st.none(), st.floats(0, 100)))
def test_an_attempt_comes_back_from_its_json_as_it_was(index, worker, start, stop, error, outcome, backoff):
    row = {"index": index, "worker": worker, "start": start, "stop": stop, "error": error, "outcome": outcome,
           "backoff": backoff, "unknown": "ignored"}
    a = AttemptRecord.from_meta(row)
    back = AttemptRecord.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a and back.to_dict() == a.to_dict()
    assert a.worker == (worker or "?") and a.outcome == (outcome or "retried")
    assert a.timed == (start is not None and stop is not None)
    assert a.duration == (max(0.0, stop - start) if a.timed else 0.0)


def test_unknown_times_are_nan_in_memory_and_null_in_json():
    a = AttemptRecord.from_meta({"index": 2, "worker": "w1", "outcome": "lost"})
    assert math.isnan(a.start) and math.isnan(a.stop) and not a.timed and a.duration == 0.0
    assert a.to_dict()["start"] is None and a.to_dict()["stop"] is None


def test_a_clock_step_back_never_makes_a_negative_duration():
    assert AttemptRecord(1, "w", start=5.0, stop=4.0).duration == 0.0


def test_an_attempt_without_its_tasks_index_is_refused():
    with pytest.raises(ValueError, match=r"needs the index of its task \(got keys \['worker'\]\)"):
        AttemptRecord.from_meta({"worker": "w1"})


def test_an_unknown_outcome_is_refused_naming_the_task():
    with pytest.raises(ValueError, match=r"attempt of task 4: outcome 'crashed' is not one of \['lost', 'retried'\]"):
        AttemptRecord.from_meta({"index": 4, "outcome": "crashed"})


def test_records_are_equal_by_what_they_say_nan_times_included():
    assert AttemptRecord(1, "w") == AttemptRecord(1, "w")
    assert AttemptRecord(1, "w") != AttemptRecord(1, "w", error="OSError")
    assert AttemptRecord(1, "w") != {"index": 1}
