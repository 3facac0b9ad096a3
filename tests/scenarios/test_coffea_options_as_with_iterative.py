"""coffea's options behave with ``RedisExecutor`` as with coffea's own IterativeExecutor:
an ``accumulate`` that fails raises as there (it used to wait out the map's timeout, a
TimeoutError after 240 s), ``skipbadfiles`` warns on the client, ``use_result_type`` gives
an ``Err``, ``retries`` and ``retry_on`` run a failing item again, ``savemetrics`` and
``maxchunks`` give coffea's metrics (a warm rerun reads 0 bytes), and a wrong tree name in
a fileset names the trees there are. The imports users type work, and ``import rhtc`` (its
errors included) does not import coffea.

Real parts: a real redis-server and real worker processes (conftest), coffea's
IterativeExecutor as the reference, the real CMS NanoAOD samples, a fresh interpreter for
the imports.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from tests.conftest import NANOAOD, ROOT, map_keys, needs_nanoaod
from tests.helpers import poll_until
from tests.kits.nanoaod import DY

coffea_processor = pytest.importorskip("coffea.processor")
from coffea.nanoevents import NanoAODSchema  # noqa: E402
from coffea.processor.executor import Err  # noqa: E402
from coffea.util import _exception_chain  # noqa: E402

from tests.kits.coffea import count_processor  # noqa: E402


# -- the imports users type ----------------------------------------------------------------------

@pytest.mark.heavy
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


# -- ours beside IterativeExecutor on the real samples ---------------------------------------------

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


@needs_nanoaod
def test_a_wrong_tree_name_in_a_coffea_fileset_names_the_trees(broker, workers):
    pytest.importorskip("coffea")
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema
    from coffea.processor.executor import UprootMissTreeError
    from rhtc.client.coffea import RedisExecutor
    workers.start(1)
    run = processor.Runner(executor=RedisExecutor(broker=broker.config, status=False),
                           schema=NanoAODSchema, chunksize=100)
    with pytest.raises(UprootMissTreeError) as info:      # as IterativeExecutor raises it
        run({"dy": [DY]}, processor_instance=count_processor(), treename="Evnts")
    head = "\n".join(info.value.__notes__)                   # the note naming the item, and what to do
    assert "no tree 'Evnts'" in head and "Events" in head.split("no tree 'Evnts'")[1], head
    assert "pass skipbadfiles=True" not in head and "skipbadfiles=True cannot help" in head, head
