"""Every attempt is on the run record and the timeline: an attempt that failed and was
retried, and one lost with its task process (the worker restarts it: ``WorkerLost`` once
the attempts are spent), each with its worker, its error and its time; the efficiency
figures count them (a failed attempt kept its worker busy); the record keeps them through
a save and a load; the timeline draws and names them. A task process restart is on the
record of a map that succeeded, too.

Real parts: a real redis-server and real worker processes (conftest)."""
from __future__ import annotations

import pytest

from rhtc.broker.wire.config import settings as process_settings


def _raise_or_crash(i):
    import os as _os
    import time as _t
    if i == 3:
        raise ValueError(f"task {i} always raises")
    if i == 5:
        _t.sleep(0.3)
        _os._exit(1)                  # kills its task process: the worker restarts it
    _t.sleep(0.3)
    return i


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_failed_attempts_retries_and_lost_runs_are_on_the_record_and_timeline(broker, workers, tmp_path):
    import rhtc
    from rhtc.client.reports.efficiency import efficiency
    from rhtc.client.reports.record import RunRecord
    from rhtc.client.reports.timeline import plot_timeline
    (name,) = workers.start(1)
    out = rhtc.remote_map(_raise_or_crash, range(12), broker=broker.config, retries=2, errors="return",
                          progress=False, timeout=200)
    assert [type(v).__name__ for v in out].count("RemoteError") == 2
    assert out[5].remote_type == "WorkerLost"
    record = rhtc.last_map().record()
    assert len(record.tasks) == record.n_tasks == 12, "every task has a row, the WorkerLost one too"
    lost_row = next(t for t in record.tasks if t.index == 5)
    assert lost_row.worker == name and lost_row.stop > lost_row.start and "WorkerLost" in lost_row.error
    numbers = efficiency(record)
    assert numbers["errors"] == 2, "two tasks failed"

    retried = [a for a in record.attempts if a.index == 3]
    assert len(retried) == 2 and all(a.outcome == "retried" and a.timed and a.worker == name for a in retried)
    assert all("ValueError: task 3 always raises" in a.error and a.backoff > 0 for a in retried)
    lost = [a for a in record.attempts if a.index == 5]
    assert len(lost) == process_settings().max_attempts - 1
    assert all(a.outcome == "lost" and a.timed and a.worker == name and "exit code 1" in a.error for a in lost)
    assert numbers["failed_attempts"] == len(retried) + len(lost) and numbers["lost_attempts"] == len(lost)
    assert numbers["backoff"] == pytest.approx(sum(a.backoff for a in retried))

    without = RunRecord.from_dict({**record.to_dict(), "attempts": []})
    assert numbers["busy"] > efficiency(without)["busy"], "a failed attempt kept its worker busy"

    saved = RunRecord.load(record.save(tmp_path / "run.json"))
    assert saved.attempts == record.attempts
    png = tmp_path / "timeline.png"
    figure = plot_timeline(saved, path=png)
    title = figure._suptitle.get_text()
    assert "12/12 tasks" in title and "2 failed tasks" in title and "failed attempts" in title
    legend = [t.get_text() for ax in figure.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("failed attempt, retried (2)" in t for t in legend)
    assert any(f"attempt lost with its process ({len(lost)})" in t for t in legend)
    assert png.stat().st_size > 0


def _crash_first_time(marker):
    import os as _os
    if not _os.path.exists(marker):
        open(marker, "w").close()
        _os._exit(1)
    return "ok"


@pytest.mark.timeout(120)
def test_a_task_process_restart_is_on_the_record_of_a_map_that_succeeded(broker, workers, tmp_path):
    import rhtc
    from rhtc.client.reports.efficiency import efficiency
    (name,) = workers.start(1)
    marker = str(tmp_path / "crashed")
    assert rhtc.remote_map(_crash_first_time, [marker], broker=broker.config, progress=False,
                           timeout=100) == ["ok"]
    record = rhtc.last_map().record()
    (lost,) = record.attempts
    assert lost.outcome == "lost" and lost.worker == name and lost.timed and "exit code 1" in lost.error
    numbers = efficiency(record)
    assert numbers["errors"] == 0 and numbers["failed_attempts"] == numbers["lost_attempts"] == 1
