"""Issue 22, cases 1, 2, 6 and 7: no hang on a bad fold, coffea's options as in coffea's own
executors, the imports users type, every attempt on the run record and the timeline.

Real parts: a real redis-server and real worker processes (conftest), coffea's
IterativeExecutor as the reference, the real CMS NanoAOD samples.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings

import pytest

from rhtc.broker.wire.config import settings as process_settings
from rhtc.broker.storage import Storage
from tests.conftest import NANOAOD, ROOT, map_keys, needs_nanoaod
from tests.helpers import poll_until


def _slow_square(x):
    import time as _t
    _t.sleep(0.2)
    return x * x


def _refuse_fold(a, b):
    raise ValueError("cannot fold these two")


# -- case 1: an error while folding or collecting ends the map and is raised -------------------

def test_remote_map_reduce_error_names_the_task_and_removes_the_keys(broker, storage, workers):
    from rhtc import remote_map
    workers.start(1)
    with pytest.raises(ValueError, match="cannot fold") as info:
        remote_map(_slow_square, range(6), broker=broker.config, reduce=_refuse_fold, progress=False)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "while folding the result of task" in notes and "argument:" in notes
    assert poll_until(lambda: map_keys(storage) == [], 30), map_keys(storage)


def test_submit_reduce_error_ends_the_map_at_once(broker, storage, workers):
    from rhtc import submit
    workers.start(1)
    handle = submit(_slow_square, range(30), broker=broker.config, reduce=_refuse_fold)
    assert poll_until(handle.done, 90), "the map never reported done after its fold failed"
    assert handle.received < 30              # ended at the error, not after every task
    with pytest.raises(ValueError, match="cannot fold") as info:
        handle.wait(5)
    assert "while folding the result of task" in "\n".join(info.value.__notes__)
    assert poll_until(lambda: map_keys(storage) == [], 30), map_keys(storage)


def test_broker_lost_while_collecting_in_the_background_ends_the_map(broker, workers):
    from rhtc.client.api import MapHandle
    from rhtc.client.errors import BrokerLost
    from rhtc.client.engine.maprun import MapRun
    workers.start(1)
    impatient = dataclasses.replace(process_settings(), broker_patience=2.0)
    run = MapRun(Storage(broker.config, settings=impatient), _slow_square, list(range(200)))
    run.submit()
    handle = MapHandle(run).start_background()
    assert poll_until(lambda: handle.received > 0, 60)
    workers.stop_all()
    broker.stop()
    assert poll_until(handle.done, 90), "the map never reported done after its broker went away"
    with pytest.raises(BrokerLost):
        handle.wait(5)


# -- case 6: the imports users type ------------------------------------------------------------

def test_imports_users_type_work_and_import_rhtc_stays_without_coffea():
    code = ("import sys, rhtc\n"
            "from rhtc import ChunkFileError, BranchNotFound, WorkItemFailed, RemoteError, BrokerLost, "
            "BrokerFull, MapCancelled, KeyMismatch, BrokerNotConfigured\n"
            "assert issubclass(ChunkFileError, OSError)\n"
            "assert 'coffea' not in sys.modules, 'import rhtc (and its errors) imported coffea'\n"
            "from rhtc.coffea import RedisExecutor, worker_cache, WorkItemFailed as W2\n"
            "import rhtc.coffea\n"
            "assert W2 is WorkItemFailed and rhtc.coffea.RedisExecutor is RedisExecutor\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("option", ["--workers", "--dask-workers"])
def test_bench_dimuon_refuses_zero_workers(tmp_path, option):
    from click.testing import CliRunner
    from rhtc.bench.dimuon import dimuon_command
    result = CliRunner().invoke(dimuon_command, [option, "0", "--files", "1", "--events", "100", "--no-dask",
                                                 "--repeats", "1", "--data-dir", str(tmp_path / "data"),
                                                 "--json", str(tmp_path / "b.json"), "--no-progress"])
    assert result.exit_code == 2, result.output + repr(result.exception)
    assert option in result.output and "0" in result.output
    assert not isinstance(result.exception, ZeroDivisionError)


# -- cases 1 and 2 with coffea: ours beside IterativeExecutor on the real samples -------------

coffea_processor = pytest.importorskip("coffea.processor")
from coffea.nanoevents import NanoAODSchema  # noqa: E402
from coffea.processor.executor import Err  # noqa: E402
from coffea.util import _exception_chain  # noqa: E402

SAMPLES = {"ttbar2015": [str(NANOAOD / "nanoAOD_2015_CMS_Open_Data_ttbar.root")],
           "dy2018": [str(NANOAOD / "nano_dy.root")],
           "egamma2022": [str(NANOAOD / "EGamma_2022E_v13.root")]}


class _Count(coffea_processor.ProcessorABC):
    """Events and muons per dataset; raises OSError on the datasets in ``bad``, or on the
    first run of each item while ``flaky_dir`` holds no marker for it."""

    def __init__(self, bad=(), flaky_dir=None, unfoldable=False):
        self.bad, self.flaky_dir, self.unfoldable = tuple(bad), flaky_dir, unfoldable

    def process(self, events):
        import numpy as np
        meta = events.metadata
        if meta["dataset"] in self.bad:
            raise OSError(f"unreadable basket in {meta['filename']}")
        if self.flaky_dir is not None:
            marker = os.path.join(self.flaky_dir, f"{meta['dataset']}-{meta['entrystart']}")
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise OSError(f"flaky read at entry {meta['entrystart']}")
        if self.unfoldable:              # arrays of different shapes: coffea cannot add them
            return {"shape": np.zeros(1 + meta["entrystart"] // 50)}
        import awkward as ak
        return {meta["dataset"]: {"events": len(events), "muons": int(ak.sum(ak.num(events.Muon)))}}

    def postprocess(self, accumulator):
        return accumulator


def _runner(executor, **options):
    return coffea_processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=50, **options)


def _ours(broker, **kwargs):
    from rhtc.coffea import RedisExecutor
    return RedisExecutor(broker=broker.config, status=False, timeout=240, **kwargs)


def _run_recording(run, fileset, processor_instance):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run(fileset, processor_instance=processor_instance, treename="Events")
    return out, caught


@needs_nanoaod
def test_coffea_accumulate_failing_raises_like_iterative(broker, storage, workers):
    workers.start(1)
    fileset = {"ttbar2015": SAMPLES["ttbar2015"]}
    with pytest.raises(ValueError):
        _runner(coffea_processor.IterativeExecutor(status=False))(
            fileset, processor_instance=_Count(unfoldable=True), treename="Events")
    with pytest.raises(ValueError) as info:          # before: TimeoutError after 240 s
        _runner(_ours(broker))(fileset, processor_instance=_Count(unfoldable=True), treename="Events")
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "while folding the result of task" in notes and "nanoAOD_2015" in notes and "entries" in notes
    assert poll_until(lambda: map_keys(storage) == [], 30), map_keys(storage)


@needs_nanoaod
def test_skipbadfiles_warning_reaches_the_client_as_with_iterative(broker, workers):
    workers.start(1)
    proc = _Count(bad=("dy2018",))
    theirs, their_warnings = _run_recording(
        _runner(coffea_processor.IterativeExecutor(status=False, retries=0), skipbadfiles=True), SAMPLES, proc)
    ours, our_warnings = _run_recording(_runner(_ours(broker), skipbadfiles=True), SAMPLES, proc)
    assert ours == theirs and "dy2018" not in ours
    for caught in (their_warnings, our_warnings):
        skips = [w for w in caught if "Skipping bad file" in str(w.message)]
        assert skips and all(issubclass(w.category, UserWarning) for w in skips), \
            [str(w.message)[:120] for w in caught]
        assert "nano_dy.root" in str(skips[0].message)


@needs_nanoaod
def test_use_result_type_gives_err_as_with_iterative(broker, workers):
    workers.start(1)
    proc = _Count(bad=("dy2018",))
    options = dict(skipbadfiles=True, use_result_type=True)
    theirs = _runner(coffea_processor.IterativeExecutor(status=False, retries=0), **options)(
        SAMPLES, processor_instance=proc, treename="Events")
    ours = _runner(_ours(broker), **options)(SAMPLES, processor_instance=proc, treename="Events")
    for result in (theirs, ours):
        assert isinstance(result, Err), result
        assert any(isinstance(e, OSError) for e in _exception_chain(result.exception))


@needs_nanoaod
def test_retry_on_matches_the_processors_own_exception(broker, workers, tmp_path):
    workers.start(1)
    fileset = {"ttbar2015": SAMPLES["ttbar2015"]}
    (tmp_path / "iterative").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = _runner(coffea_processor.IterativeExecutor(status=False, retries=1))(
        fileset, processor_instance=_Count(flaky_dir=str(tmp_path / "iterative")), treename="Events")
    ours = _runner(_ours(broker, task_retries=1, retry_on=(OSError,)))(
        fileset, processor_instance=_Count(flaky_dir=str(tmp_path / "ours")), treename="Events")
    assert ours == theirs == {"ttbar2015": {"events": 200, "muons": theirs["ttbar2015"]["muons"]}}
    assert len(os.listdir(tmp_path / "ours")) == 4          # every item failed once, then ran again


@needs_nanoaod
def test_coffea_retries_as_with_iterative(broker, workers, tmp_path):
    workers.start(1)
    fileset = {"ttbar2015": SAMPLES["ttbar2015"]}
    (tmp_path / "iterative").mkdir()
    (tmp_path / "ours").mkdir()
    theirs, their_warnings = _run_recording(_runner(coffea_processor.IterativeExecutor(status=False, retries=1)),
                                            fileset, _Count(flaky_dir=str(tmp_path / "iterative")))
    ours, our_warnings = _run_recording(_runner(_ours(broker, retries=1)), fileset,
                                        _Count(flaky_dir=str(tmp_path / "ours")))
    assert ours == theirs
    for caught in (their_warnings, our_warnings):
        assert any("Performed attempt 1 out of 2" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="retries"):
        _ours(broker, retries=-1)


_ITERATIVE_CACHE: dict = {}


def _iterative_cache():
    """An in-process cache strategy for IterativeExecutor (what coffea offers without workers)."""
    return _ITERATIVE_CACHE


@needs_nanoaod
def test_savemetrics_and_maxchunks_as_with_iterative_and_per_item_bytes(broker, workers):
    from rhtc.coffea import worker_cache
    import rhtc
    workers.start(1)
    options = dict(savemetrics=True, maxchunks=2)
    _ITERATIVE_CACHE.clear()
    theirs_executor = coffea_processor.IterativeExecutor(status=False)
    (theirs, their_metrics), _ = _run_recording(
        _runner(theirs_executor, cachestrategy=_iterative_cache, **options), SAMPLES, _Count())
    (_, their_warm_metrics), _ = _run_recording(
        _runner(theirs_executor, cachestrategy=_iterative_cache, **options), SAMPLES, _Count())
    _ITERATIVE_CACHE.clear()
    ours_executor = _ours(broker)
    (cold, cold_metrics), _ = _run_recording(_runner(ours_executor, cachestrategy=worker_cache, **options),
                                             SAMPLES, _Count())
    (warm, warm_metrics), _ = _run_recording(_runner(ours_executor, cachestrategy=worker_cache, **options),
                                             SAMPLES, _Count())
    warm_record = rhtc.last_map().record()
    assert cold == warm == theirs
    for ours, reference in ((cold_metrics, their_metrics), (warm_metrics, their_warm_metrics)):
        assert ours["chunks"] == reference["chunks"] == 5      # maxchunks=2 (dy2018 has only 1)
        assert ours["entries"] == reference["entries"]
        assert sorted(ours["columns"]) == sorted(reference["columns"])   # a cache hit logs no column
    assert 0 < cold_metrics["bytesread"] <= their_metrics["bytesread"]
    assert sum(t.bytes_file for t in warm_record.tasks) == 0
    assert warm_metrics["bytesread"] == 0, "a warm rerun read nothing from the files"


# -- case 7: every attempt on the run record and the timeline ------------------------------------

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
