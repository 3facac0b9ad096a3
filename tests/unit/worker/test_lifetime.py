"""When a worker leaves on its own terms (worker/lifetime.py): the plan drains a margin
before the end (at most a tenth of the lifetime), each worker's lifetime cut by a random
part of the stagger (at most half) so a pool does not leave at once; the walltime read
from the HTCondor job ad (seconds, or minutes) and from Slurm's time left."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.worker.lifetime import LeavePlan, job_walltime, slurm_time_left
from tests.helpers import examples

SETTINGS = settings(settings.get_profile("default"), max_examples=examples(300), deadline=None, derandomize=True,
                    database=None)


@SETTINGS
@given(lifetime=st.floats(1.0, 1e7), margin=st.floats(0.0, 1e6), stagger=st.floats(-1.0, 2.0),
       started=st.floats(1e6, 2e9))   # (a time.time(): never 0)
def test_a_worker_drains_before_its_end_within_its_lifetime(lifetime, margin, stagger, started):
    plan = LeavePlan.make(lifetime, margin, stagger, started)
    life, tol = plan.ends_at - started, 1e-3          # (seconds: the times are time.time()'s floats)
    assert lifetime * (1 - max(0.0, min(stagger, 0.5))) - tol <= life <= lifetime + tol
    assert plan.ends_at - plan.leaves_at == pytest.approx(min(margin, lifetime / 10), rel=1e-6, abs=1e-3)
    assert started <= plan.leaves_at <= plan.ends_at
    assert not plan.due(plan.leaves_at - 1.0) and plan.due(plan.leaves_at)


@pytest.mark.parametrize("lifetime", [0, 0.0, -5, None])
def test_a_worker_without_a_lifetime_never_drains(lifetime):
    plan = LeavePlan.make(lifetime, 60, 0.1, 1000.0)
    assert plan == LeavePlan() and not plan.due(1e12)


def test_a_pool_started_at_once_does_not_leave_at_once():
    ends = {LeavePlan.make(3600, 300, 0.1, 0.0).ends_at for _ in range(50)}
    assert len(ends) > 40 and all(3240 <= e <= 3600 for e in ends)


@pytest.mark.parametrize("ad, walltime", [
    ("ClusterId = 7\nMaxRuntime = 1200\n", 1200.0),
    ("MaxWallTimeMins = 90\n", 5400.0),
    ("MaxRuntime = undefined\nMaxWallTimeMins = 2\n", 120.0),      # the first that reads
    ("ClusterId = 7\n", None),
])
def test_the_walltime_is_read_from_the_job_ad(tmp_path, ad, walltime):
    path = tmp_path / ".job.ad"
    path.write_text(ad)
    assert job_walltime({"_CONDOR_JOB_AD": str(path)}) == walltime


def test_no_batch_system_no_walltime(tmp_path):
    assert job_walltime({}) is None
    assert job_walltime({"_CONDOR_JOB_AD": str(tmp_path / "gone.ad")}) is None


@pytest.mark.parametrize("text, seconds", [
    ("1-02:00:00", 93600.0), ("02:03:04", 7384.0), ("05:30", 330.0), ("0:07", 7.0), (" 10:00 \n", 600.0),
    ("UNLIMITED", None), ("INVALID", None), ("", None), ("1-2", None),
])
def test_slurms_time_left_in_seconds(text, seconds):
    assert slurm_time_left(text) == seconds
