"""The first run of the day, already warm (``rhtc warm``, client/warm.py).

A cold run records which branches of which chunks its tasks read (each worker says so in
its result's metadata: broker/wire/reads.py; the run record keeps it: client/reports/reads.py).
Every worker is then replaced by new processes with new names; ``rhtc.warm`` (or ``rhtc
warm RECORD``) reads those branches into the new pool, and the next run of the analysis
reads 0 bytes from the files and gives the cold run's answer: on a fresh node disk tier
(where only the warm can make it so: the same run without it reads the files) and on the
same tier. A warm that cannot read a file says which; one that is cancelled (its handle,
Ctrl-C) leaves no map behind. A record without the list, and what a task read on the wire
and in the record: tests/unit/client/test_warm.py, tests/unit/broker/wire/test_reads.py.

Real parts: a redis-server and ``python -m rhtc.worker --disk-cache DIR`` processes
(tests/conftest.py), the real CMS NanoAOD samples.
"""
from __future__ import annotations

import _thread
import shutil
import threading

import pytest
from click.testing import CliRunner

import rhtc
from rhtc import MapCancelled
from rhtc.client import make_chunks
from rhtc.client.ops.cli import main as cli
from rhtc.client.reports.record import RunRecord
from rhtc.client.warm import WarmFailed, submit_warm, warm
from tests.conftest import NANOAOD, needs_nanoaod

FILES = [NANOAOD / "nano_dy.root", NANOAOD / "nano_dimuon.root"]


def muon_sums(chunk):
    """The analysis: awkward branches and a numpy one, summed per chunk."""
    import awkward as ak
    muons = chunk.arrays(["Muon_pt", "Muon_eta"], how=dict)
    n = chunk.arrays(["nMuon"], library="np")["nMuon"]
    return int(n.sum()), float(ak.sum(muons["Muon_pt"])), float(ak.sum(abs(muons["Muon_eta"])))


def _replace_pool(workers, tier, n: int = 2) -> list[str]:
    """Every worker stopped (SIGTERM, by pid: its disk writes finish), new ones with new
    names started on ``tier``."""
    workers.stop_all()
    return workers.start(n, extra=("--disk-cache", str(tier)))


def _run(broker):
    value = rhtc.remote_map(muon_sums, make_chunks([str(f) for f in FILES], step=10), broker=broker.config,
                            progress=False, timeout=120)
    return value, rhtc.last_map().record().tasks


@needs_nanoaod
@pytest.mark.timeout(300)
def test_after_every_worker_is_replaced_warm_makes_the_next_run_read_nothing_from_the_files(
        broker, workers, tmp_path, monkeypatch):
    workers.start(2, extra=("--disk-cache", str(tmp_path / "tier-0")))
    cold, tasks = _run(broker)
    assert all(t.bytes_file > 0 for t in tasks)
    saved = rhtc.last_map().record().save(tmp_path / "run.json")

    # without warm: a new pool on a fresh tier reads the files (what only warm can change)
    _replace_pool(workers, tmp_path / "tier-a")
    value, tasks = _run(broker)
    assert value == cold and sum(t.bytes_file for t in tasks) > 0

    # a new pool on a fresh tier, warmed in Python from the session's last map (the run above)
    new = _replace_pool(workers, tmp_path / "tier-b")
    summary = rhtc.warm(broker=broker.config, progress=False)
    assert summary.chunks == 8 and summary.bytes_file > 0 and not summary.not_held and not summary.failed
    assert set(summary.workers) == set(new) and sum(w["chunks"] for w in summary.workers.values()) == 8
    assert summary.nodes and "every chunk is held by a live worker" in str(summary)
    value, tasks = _run(broker)
    assert value == cold
    assert [t.bytes_file for t in tasks] == [0] * 8, [(t.index, t.worker, t.source) for t in tasks]
    assert all(t.bytes_cache > 0 and t.bytes_disk == 0 for t in tasks)      # each found where warm put it

    # a new pool on the same tier, warmed with the CLI: from the node's disk into memory
    new = _replace_pool(workers, tmp_path / "tier-b")
    for name, value in broker.config.env().items():
        monkeypatch.setenv(name, value)
    out = CliRunner().invoke(cli, ["warm", str(saved), "--no-progress"])
    assert out.exit_code == 0, out.output
    assert "warmed 8 chunks of map" in out.output and all(name in out.output for name in new)
    value, tasks = _run(broker)
    assert value == cold
    assert [t.bytes_file for t in tasks] == [0] * 8 and all(t.bytes_disk == 0 for t in tasks)


@needs_nanoaod
@pytest.mark.timeout(300)
def test_a_warm_that_cannot_read_a_file_names_it_and_warms_the_rest(broker, workers, tmp_path, monkeypatch):
    copy = tmp_path / "gone.root"
    shutil.copy(FILES[0], copy)
    workers.start(1, extra=("--disk-cache", str(tmp_path / "tier-0")))
    chunks = make_chunks([str(copy), str(FILES[1])], step=10)
    rhtc.remote_map(muon_sums, chunks, broker=broker.config, progress=False, timeout=120)
    saved = rhtc.last_map().record().save(tmp_path / "run.json")
    copy.unlink()
    _replace_pool(workers, tmp_path / "tier-1", n=1)
    with pytest.raises(WarmFailed, match=f"{copy}: .*4 chunks") as err:
        warm(saved, broker=broker.config, progress=False)
    assert err.value.summary.chunks == 4 and str(copy) in str(err.value.summary)

    for name, value in broker.config.env().items():
        monkeypatch.setenv(name, value)
    out = CliRunner().invoke(cli, ["warm", str(saved), "--no-progress"])
    assert out.exit_code == 1 and str(copy) in out.output and "could not be read" in out.output


def _unread_record(tmp_path) -> RunRecord:
    """A record of a run over the real files (as a worker would have written its reads)."""
    chunks = make_chunks([str(f) for f in FILES], step=10)
    rec = RunRecord(map_id="m1", function="muons", n_tasks=len(chunks))
    rec.use_arguments(chunks)
    for i in range(len(chunks)):
        rec.add_task({"index": i, "worker": "w", "start": 0, "stop": 1, "reads": "Muon_pt"})
    return rec


@needs_nanoaod
def test_a_warm_is_a_map_its_handle_cancels(broker, storage, tmp_path):
    """No worker takes it (none is running): cancelled by its handle, it leaves no map."""
    w = submit_warm(_unread_record(tmp_path), broker=broker.config)
    assert w.progress() == (0, 8)
    w.cancel()
    with pytest.raises(MapCancelled):
        w.wait(30)
    assert storage.pool.maps_in_flight() == []


@needs_nanoaod
def test_ctrl_c_cancels_a_warm(broker, storage, tmp_path):
    """Ctrl-C (a KeyboardInterrupt in the waiting thread) once the warm map is in flight."""
    def press_ctrl_c_when_in_flight():
        while not storage.pool.maps_in_flight():
            threading.Event().wait(0.02)
        _thread.interrupt_main()

    presser = threading.Thread(target=press_ctrl_c_when_in_flight, daemon=True)
    presser.start()
    with pytest.raises(KeyboardInterrupt):
        warm(_unread_record(tmp_path), broker=broker.config, progress=False)
    presser.join(10)
    assert storage.pool.maps_in_flight() == []
