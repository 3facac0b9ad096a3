"""coffea's contract, checked by coffea's own tests: its executor tests pass with
``RedisExecutor``, and its ``Runner(checkpointer=...)`` resumes an interrupted run.

``test_coffea_executor_tests_pass_on_redis_executor`` takes the source distribution of the
installed coffea (``tests/kits/coffea_sdist.py``: downloaded once per machine into rhtc's
cache, never into the repository) and runs its
``tests/test_local_executors.py`` in a subprocess, in the unpacked tree (its tests read
``tests/samples/...``), with ``tests/coffea_contract_plugin.py``: every test there
parametrized over ``[IterativeExecutor, FuturesExecutor]`` gets ``[IterativeExecutor,
RedisExecutor]``, on this module's broker and two workers, started once for all cases. By
default only the ``RedisExecutor`` cases run (``-k RedisExecutor``: 148 of them, TTree,
RNTuple and Parquet, about two minutes here); ``RHTC_COFFEA_CONTRACT=all`` runs the whole
file, coffea's own ``IterativeExecutor`` and ``FuturesExecutor`` cases too (about 12
minutes on two cores). Every case must pass; a package index that cannot be reached is a
failure that says so, not a skip.

Real parts: a real redis-server and worker processes (``LocalCluster``), coffea's own test
file, samples, processor and ``SimpleCheckpointer``, real uproot reads.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import register_by_value, wait_until
from tests.kits.coffea_sdist import COFFEA_VERSION, EXECUTOR_TESTS, SdistUnavailable, unpacked_sdist
from tests.samples import NANOAOD, needs_nanoaod

pytest.importorskip("coffea")
from coffea import processor  # noqa: E402
from coffea.nanoevents import NanoAODSchema  # noqa: E402

from coffea.util import _exception_chain  # noqa: E402

from rhtc import RemoteError, WorkItemFailed  # noqa: E402
from rhtc.client.local import LocalCluster  # noqa: E402
from rhtc.coffea import RedisExecutor  # noqa: E402

register_by_value(__name__)   # the processors below reach workers in any cwd

pytestmark = pytest.mark.heavy          # starts its own broker and workers (LocalCluster), once for the module

PLUGIN = Path(__file__).parents[1] / "coffea_contract_plugin.py"      # tests/coffea_contract_plugin.py
FILETYPES = ("ttree", "rntuple", "parquet")


@pytest.fixture(scope="module")
def cluster():
    """A broker and two workers for the whole module (started once; stopped at its end)."""
    c = LocalCluster(n_workers=2).start()
    yield c
    c.close()


@pytest.fixture(scope="module")
def coffea_sdist() -> Path:
    """The unpacked source distribution of the installed coffea (tests/kits/coffea_sdist.py:
    downloaded once per machine into rhtc's cache; ``make test-deps`` fetches it ahead)."""
    try:
        return unpacked_sdist()
    except SdistUnavailable as err:
        pytest.fail(str(err), pytrace=False)


def _outcomes(report: Path) -> dict[str, str]:
    """Each test case of a junit XML report: passed, failed, error or skipped."""
    out = {}
    for case in ET.parse(report).iter("testcase"):
        tags = {child.tag for child in case}
        out[case.get("name")] = ("failed" if "failure" in tags else "error" if "error" in tags
                                 else "skipped" if "skipped" in tags else "passed")
    return out


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_coffea_executor_tests_pass_on_redis_executor(cluster, coffea_sdist, tmp_path):
    every_case = os.environ.get("RHTC_COFFEA_CONTRACT", "") == "all"
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    shutil.copy(PLUGIN, plugin_dir / "rhtc_contract_plugin.py")
    report, log = tmp_path / "report.xml", tmp_path / "pytest.log"
    env = dict(os.environ, **cluster.config.env(),
               PYTHONPATH=os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    cmd = [sys.executable, "-m", "pytest", EXECUTOR_TESTS, "-p", "rhtc_contract_plugin", "-p", "no:cacheprovider",
           "-q", "-W", "ignore::RuntimeWarning", "--timeout=300", f"--junitxml={report}",
           *([] if every_case else ["-k", "RedisExecutor"])]
    started = time.monotonic()
    with open(log, "w") as out:
        try:
            done = subprocess.run(cmd, cwd=coffea_sdist, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=2200)
        except subprocess.TimeoutExpired:
            pytest.fail(f"coffea's executor tests did not finish in 2200 s; their output: {log}", pytrace=False)
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    assert report.exists(), f"coffea's tests produced no report (exit {done.returncode}):\n{text[-4000:]}"
    outcomes = _outcomes(report)
    ours = {name: result for name, result in outcomes.items() if "RedisExecutor" in name}
    bad = sorted(name for name, result in outcomes.items() if result != "passed")
    assert not bad, (f"{len(bad)} of {len(outcomes)} cases of coffea {COFFEA_VERSION}'s {EXECUTOR_TESTS} did not "
                     f"pass ({len(ours)} with RedisExecutor): {bad[:20]}\n\n{text[-6000:]}")
    assert done.returncode == 0, text[-4000:]
    per_type = Counter(next((t for t in FILETYPES if name.endswith(f"-{t}]")), "other") for name in ours)
    assert all(per_type[t] > 0 for t in FILETYPES), f"no RedisExecutor case for some file type: {per_type}"
    assert len(ours) >= 148, f"only {len(ours)} RedisExecutor cases ran: {sorted(ours)}"
    print(f"\ncoffea {COFFEA_VERSION} {EXECUTOR_TESTS}: {len(outcomes)} cases passed, {len(ours)} with "
          f"RedisExecutor ({dict(per_type)}), in {seconds:.0f} s")


# -- Runner(checkpointer=...): an interrupted run resumes ------------------------------------

class _Recording(processor.ProcessorABC):
    """Muons per dataset and the items it ran; each run of an item leaves a file in
    ``runs_dir``. With ``hold_after=k``, the first ``k`` items to start run through and
    every later one waits at the gate (``gate`` appears when the run is interrupted), then
    raises: it never returns, so it is never checkpointed."""

    def __init__(self, runs_dir: str, label: str, hold_after: int | None = None, gate: str | None = None):
        self.runs_dir, self.label, self.hold_after, self.gate = runs_dir, label, hold_after, gate

    def _start_order(self) -> int:
        i = 0
        while True:      # the first free slot, taken atomically: the order in which items start
            try:
                os.close(os.open(os.path.join(self.runs_dir, f"{self.label}-slot-{i}"), os.O_CREAT | os.O_EXCL))
                return i
            except FileExistsError:
                i += 1

    def process(self, events):
        import awkward as ak
        meta = events.metadata
        item = f"{meta['dataset']}-{meta['entrystart']}"
        open(os.path.join(self.runs_dir, f"{self.label}-ran-{item}"), "w").close()
        if self.hold_after is not None and self._start_order() >= self.hold_after:
            for _ in range(6000):      # at most 5 minutes: the test fails then, nothing hangs
                if os.path.exists(self.gate):
                    break
                time.sleep(0.05)
            open(os.path.join(self.runs_dir, f"{self.label}-released-{item}"), "w").close()
            raise RuntimeError(f"item {item} was running when the run was interrupted")
        return {"muons": {meta["dataset"]: int(ak.sum(ak.num(events.Muon)))}, "items": {item}}

    def postprocess(self, accumulator):
        return accumulator


def _ran(runs_dir: Path, label: str, what: str = "ran") -> set[str]:
    prefix = f"{label}-{what}-"
    return {p.name[len(prefix):] for p in runs_dir.iterdir() if p.name.startswith(prefix)}


def _interrupt_when(condition, stop: threading.Event, failures: list) -> threading.Thread:
    """A thread that presses Ctrl-C (SIGINT to this process) as soon as ``condition()``
    holds, unless ``stop`` is set first."""
    def watch():
        for _ in range(6000):
            if stop.is_set():
                return
            if condition():
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.02)
        failures.append("the interrupting condition never held")
    thread = threading.Thread(target=watch, name="interrupt-when", daemon=True)
    thread.start()
    return thread


def _wait_idle(cluster, ended, timeout: float = 300.0) -> None:
    """Until ``ended()`` holds and every worker of ``cluster`` says it runs no task, on two
    looks a heartbeat apart (a status is at most one heartbeat old)."""
    from rhtc.broker.storage import Storage
    storage = Storage(cluster.config)
    looks: list[bool] = []

    def quiet() -> bool:
        idle = all(s.task is None for s in storage.pool.worker_statuses(queue_depths=False))
        looks.append(idle and ended())
        return looks[-2:] == [True, True]
    try:
        wait_until(quiet, timeout, "the interrupted run's items to end on the workers", interval=1.2)
    finally:
        storage.close()


@needs_nanoaod
@pytest.mark.timeout(600)
def test_checkpointer_resumes_an_interrupted_run(cluster, tmp_path):
    fileset = {"ZJets": [str(NANOAOD / "nano_dy.root")], "Data": [str(NANOAOD / "nano_dimuon.root")]}
    checkpoints, runs = tmp_path / "checkpoints", tmp_path / "runs"
    runs.mkdir()
    gate = tmp_path / "interrupted"

    def runner(executor, checkpointer=True):
        return processor.Runner(executor=executor, schema=NanoAODSchema, chunksize=10,
                                checkpointer=processor.SimpleCheckpointer(str(checkpoints)) if checkpointer else None)

    def run(executor, proc, checkpointer=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)       # NanoAODSchema's cross-references
            return runner(executor, checkpointer)(fileset, processor_instance=proc, treename="Events")

    def checkpointed() -> int:
        return sum(1 for p in checkpoints.rglob("*.coffea") if p.is_file()) if checkpoints.exists() else 0

    reference = run(processor.IterativeExecutor(status=False), _Recording(str(runs), "reference"), checkpointer=False)
    items = reference["items"]
    assert len(items) == 8, items           # 2 files x 40 events, 10 per item

    # 1: interrupted (Ctrl-C) once 3 items are checkpointed and a 4th (on either worker) runs
    # and never finishes: the rest never start. Which worker starts a held item, and whether
    # the other one starts a 5th before the interrupt, is up to routing and the machine's load:
    # the test waits for at least one, and for every started item to end before it looks.
    first, workers = 3, 2
    stop, failures = threading.Event(), []
    watcher = _interrupt_when(lambda: len(_ran(runs, "first", "slot")) > first
                              and checkpointed() >= first, stop, failures)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(RedisExecutor(broker=cluster, status=False), _Recording(str(runs), "first", first, str(gate)))
    finally:
        stop.set()
        watcher.join()
        gate.touch()           # after the map's cancel: the held items raise, nothing is queued any more
    assert not failures, failures
    _wait_idle(cluster, lambda: len(_ran(runs, "first", "released")) == len(_ran(runs, "first", "slot")) - first)
    started = _ran(runs, "first")
    held = len(started) - first
    assert checkpointed() == first and 1 <= held <= workers, (checkpointed(), sorted(started))
    assert len(_ran(runs, "first", "released")) == held, sorted(_ran(runs, "first", "released"))
    done_first = {f"{p.parent.parent.parent.name}-{p.stem.split('-')[0]}" for p in checkpoints.rglob("*.coffea")}
    assert len(done_first) == first and done_first < started < items, (done_first, started)

    # 2: the rerun resumes: it runs the 5 items without a checkpoint, and only those
    second = run(RedisExecutor(broker=cluster, status=False), _Recording(str(runs), "second"))
    assert _ran(runs, "second") == items - done_first, sorted(_ran(runs, "second"))
    assert second == reference, (second, reference)
    assert checkpointed() == len(items)

    # 3: everything checkpointed: nothing runs, the same answer
    third = run(RedisExecutor(broker=cluster, status=False), _Recording(str(runs), "third"))
    assert _ran(runs, "third") == set() and third == reference


# -- an item's error reaches the caller as coffea's executors raise it ------------------------

class _AnalysisError(RuntimeError):
    """An exception class of the analyst's own (it reaches the workers by value)."""


class _Raises(processor.ProcessorABC):
    """Raises ``error()`` on the item that starts at entry 10 (``None``: never raises)."""

    def __init__(self, error):
        self.error = error

    def process(self, events):
        if self.error is not None and events.metadata["entrystart"] == 10:
            raise self.error()
        return {"n": len(events)}

    def postprocess(self, accumulator):
        return accumulator


def _unpicklable():
    return ValueError("holds a lock", threading.Lock())


def _raised(executor, chunks, proc, **options) -> BaseException:
    run = processor.Runner(executor=executor, schema=NanoAODSchema, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(BaseException) as info:
            run((c for c in chunks), processor_instance=proc)   # a generator: chunks, not a fileset
    return info.value


@needs_nanoaod
@pytest.mark.timeout(300)
def test_item_errors_reach_the_caller_as_iterative_executor_raises_them(cluster, tmp_path):
    gone = tmp_path / "gone.root"
    shutil.copy(NANOAOD / "nano_dy.root", gone)
    run = processor.Runner(executor=processor.IterativeExecutor(status=False), schema=NanoAODSchema, chunksize=10)
    chunks = list(run.preprocess({"ZJets": [str(NANOAOD / "nano_dy.root")]}, treename="Events"))
    chunks_of_gone = list(run.preprocess({"Gone": [str(gone)]}, treename="Events"))
    gone.unlink()               # between preprocessing and processing: coffea's "Failed to open file"
    iterative = processor.IterativeExecutor(status=False, retries=0)
    ours = RedisExecutor(broker=cluster, status=False)
    cases = {"processor's ValueError": (chunks, _Raises(lambda: ValueError("bad muon"))),
             "analyst's own class": (chunks, _Raises(lambda: _AnalysisError("no jets"))),
             "file gone": (chunks_of_gone[:1], _Raises(None))}   # one failing item each: with several, the
    # one raised is the first to fail (as with FuturesExecutor), not the first in order (IterativeExecutor)
    for what, (items, proc) in cases.items():
        theirs, mine = _raised(iterative, items, proc), _raised(ours, items, proc)
        their_chain, my_chain = _exception_chain(theirs), _exception_chain(mine)
        assert [type(e) for e in my_chain[:-1]] == [type(e) for e in their_chain], (what, my_chain, their_chain)
        assert [str(e) for e in my_chain[:-1]] == [str(e) for e in their_chain], what
        remote = my_chain[-1]
        assert isinstance(remote, RemoteError) and remote.worker and remote.remote_traceback, what
        note = "\n".join(mine.__notes__)
        assert remote.worker in note and f"dataset '{items[0].dataset}'" in note, note

    # with skipbadfiles, the file that is gone is skipped as coffea skips it; the processor's error is not
    for executor in (iterative, ours):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = processor.Runner(executor=executor, schema=NanoAODSchema, skipbadfiles=True)(
                (c for c in chunks + chunks_of_gone), processor_instance=_Raises(None))
        assert out == {"n": 40} and any("Skipping bad file" in str(w.message) for w in caught), executor
        error = _raised(executor, chunks, _Raises(lambda: ValueError("bad muon")), skipbadfiles=True)
        assert type(error) is Exception and type(error.__cause__) is ValueError

    # what cannot be raised here as it was raised there: WorkItemFailed, naming its type and the item
    theirs, mine = _raised(iterative, chunks, _Raises(_unpicklable)), _raised(ours, chunks, _Raises(_unpicklable))
    assert type(theirs) is Exception and type(theirs.__cause__) is ValueError
    assert isinstance(mine, WorkItemFailed) and isinstance(mine.__cause__, RemoteError)
    assert "ValueError: ('holds a lock'" in str(mine) and "entries 10-20" in str(mine) and mine.remote.worker
