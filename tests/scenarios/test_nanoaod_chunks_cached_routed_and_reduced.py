"""Chunks of real NanoAOD on real workers: the worker's branch cache, sticky routing and
reduction.

A rerun reads nothing from the files and each chunk goes back to the worker that holds it
(an idle worker may take from the tail of a backed-up one; the routing survives a client
restart; a dead worker's chunks go to the living); a worker whose cache is too small reads
again and withdraws the chunks it let go of; a worker keeps at most ``RHTC_OPEN_FILES``
files open. What a file or a branch lacks comes back named, as a ``RemoteError`` or a
``ChunkFileError`` raised by ``make_chunks(remote=True)``. ``reduce=`` combines histograms,
counts and dicts as the same chunks one by one would.

Real parts: a real redis-server and worker processes (conftest), the real CMS NanoAOD
samples. The chunks and the cache in this process: tests/unit/client/test_chunking.py,
tests/unit/worker/test_cache.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rhtc.client import RemoteError, imap_unordered, make_chunks, remote_map
from rhtc.client.data.chunks import ChunkFileError
from rhtc.client.reduce import combine
from rhtc.examples.dimuon import dimuon
from tests.conftest import NANOAOD, ROOT, needs_nanoaod
from tests.kits.nanoaod import DY, REAL, muon_pt_sum

pytestmark = needs_nanoaod


# -- a branch or a file that is not there, on a worker -----------------------------------------

def test_missing_branch_on_a_worker_comes_back_as_remote_error(broker, workers):
    workers.start(1)
    chunks = make_chunks([REAL[0], str(NANOAOD / "scouting_nano.root")], step=100)
    out = remote_map(muon_pt_sum, chunks, broker=broker, progress=False, errors="return")
    assert isinstance(out[0], float)
    err = out[1]
    assert isinstance(err, RemoteError) and err.remote_type == "BranchNotFound"
    assert "scouting_nano.root" in str(err) and "ScoutingMuon_pt" in str(err)


@needs_nanoaod
def test_make_chunks_on_the_workers_raises_chunk_file_error(broker, workers, tmp_path):
    workers.start(1)
    good = DY
    (tmp_path / "text.root").write_text("not a ROOT file\n")
    for bad, reason in [(str(tmp_path / "gone.root"), "no such file"),
                        (str(tmp_path / "text.root"), "not ROOT")]:
        with pytest.raises(ChunkFileError) as info:           # was RemoteError, missed by except ChunkFileError
            make_chunks([good, bad], remote=True, broker=broker.config)
        assert info.value.reason == reason and bad in str(info.value), str(info.value)
        assert "on worker tw" in str(info.value)
        assert isinstance(info.value.__cause__, RemoteError)
    assert len(make_chunks(good, remote=True, broker=broker.config, step=10)) == 4


# -- the cache and the routing ----------------------------------------------------------------

@pytest.mark.quick  # smoke: the cache and routing
def test_rerun_reads_nothing_from_files_and_stays_on_the_same_worker(broker, workers):
    workers.start(2)
    chunks = make_chunks(REAL, step=5)
    first = {r.index: r for r in imap_unordered(muon_pt_sum, chunks, broker=broker)}
    assert all(r.meta["bytes_file"] > 0 for r in first.values())
    assert all(r.meta["bytes_cache"] == 0 for r in first.values())
    second = {r.index: r for r in imap_unordered(muon_pt_sum, chunks, broker=broker)}
    assert [second[i].value for i in range(len(chunks))] == [first[i].value for i in range(len(chunks))]
    home = [i for i in second if second[i].meta["worker"] == first[i].meta["worker"]]
    assert len(home) >= len(chunks) - 2      # routed home; an idle worker may steal one or two
    assert all(second[i].meta["bytes_file"] == 0 for i in home), "cached chunks read the file again"
    assert all(second[i].meta["bytes_cache"] > 0 for i in home)
    # an overlapping, different list of chunks: the common ones are still routed home
    more = chunks[::2] + make_chunks(str(NANOAOD / "nanoAOD_2015_CMS_Open_Data_ttbar.root"), step=100)
    third = list(imap_unordered(muon_pt_sum, more, broker=broker))
    cached = [r for r in third if r.index < len(chunks[::2])
              and r.meta["worker"] == second[2 * r.index].meta["worker"]]
    assert len(cached) >= len(chunks[::2]) - 2
    assert all(r.meta["bytes_file"] == 0 for r in cached)


def muon_pt_sum_held_until_stolen(chunk):
    """:func:`muon_pt_sum`; on the worker that runs the first task (the backed-up one: its
    task process), each task first waits until a task has started on another worker (at most
    30 s from the first): its queue stays backed up until the idle one steals, however fast or
    slow either gets the CPU."""
    import os
    import time
    folder = os.environ["RHTC_TEST_STEAL_DIR"]
    first, stolen = os.path.join(folder, "first"), os.path.join(folder, "stolen")
    mine = os.path.join(folder, f"pid-{os.getpid()}")
    with open(mine, "w") as f:
        f.write(str(os.getpid()))
    try:
        os.link(mine, first)                  # the first task's process, whole or not at all
    except FileExistsError:
        pass
    with open(first) as f:
        backed_up = int(f.read()) == os.getpid()
    if backed_up:
        deadline = os.stat(first).st_mtime + 30
        while not os.path.exists(stolen) and time.time() < deadline:
            time.sleep(0.05)
    else:
        open(stolen, "w").close()
    return muon_pt_sum(chunk)


def test_an_idle_worker_takes_from_the_tail_of_a_backed_up_one(broker, workers, tmp_path):
    """Every chunk is cached on worker A, so a rerun routes them all to A's queue; worker
    B, idle, takes tasks from its tail (the take script steals when B's queues are empty),
    and each chunk still runs once with the right answer. A's tasks wait for B's first
    (muon_pt_sum_held_until_stolen): B's idle wait before it steals is never a race."""
    env = {"RHTC_TEST_STEAL_DIR": str(tmp_path)}
    (a,) = workers.start(1, env=env)
    chunks = make_chunks(REAL, step=5)[:24]
    first = {r.index: r for r in imap_unordered(muon_pt_sum, chunks, broker=broker)}
    assert {r.meta["worker"] for r in first.values()} == {a}
    (b,) = workers.start(1, env=env)
    second = {r.index: r for r in imap_unordered(muon_pt_sum_held_until_stolen, chunks, broker=broker)}
    assert sorted(second) == list(range(len(chunks)))
    assert [second[i].value for i in second] == [first[i].value for i in second]
    on_b = [i for i in second if second[i].meta["worker"] == b]
    assert on_b, "the idle worker took nothing from the backed-up one's queue"
    assert len(on_b) < len(chunks), "the backed-up worker ran none of its own chunks"
    assert all(second[i].meta["bytes_file"] > 0 for i in on_b)      # not in B's cache


def test_routing_survives_a_client_restart(broker, workers):
    workers.start(2)
    script = textwrap.dedent(f"""
        from rhtc.client import imap_unordered, make_chunks
        from tests.kits.nanoaod import muon_pt_sum, REAL
        rs = list(imap_unordered(muon_pt_sum, make_chunks(REAL, step=10)))
        print(sum(r.meta['bytes_file'] for r in rs), sum(r.meta['bytes_cache'] for r in rs))
    """)
    env = dict(os.environ, **broker.config.env())
    runs = [subprocess.run([sys.executable, "-c", script], env=env, cwd=str(ROOT), capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    from_file_1, _ = map(int, runs[0].stdout.split())
    from_file_2, from_cache_2 = map(int, runs[1].stdout.split())
    assert from_file_1 > 0 and from_file_2 == 0 and from_cache_2 > 0


def test_dead_workers_chunks_go_to_the_living(broker, workers):
    names = workers.start(2, env={"RHTC_LEASE": "2"})
    chunks = make_chunks(REAL, step=5)
    first = {r.index: r for r in imap_unordered(muon_pt_sum, chunks, broker=broker)}
    victim = first[0].meta["worker"]
    workers.signal(victim, signal.SIGKILL)
    workers.procs[victim].wait(5)
    t = time.monotonic()
    second = {r.index: r for r in imap_unordered(muon_pt_sum, chunks, broker=broker)}
    assert time.monotonic() - t < 30
    assert [second[i].value for i in range(len(chunks))] == [first[i].value for i in range(len(chunks))]
    assert all(r.meta["worker"] != victim for r in second.values())
    survivor = next(n for n in names if n != victim)
    assert all(r.meta["bytes_file"] == 0 for r in second.values() if first[r.index].meta["worker"] == survivor)


@needs_nanoaod
def test_a_worker_with_a_tiny_cache_reads_again_and_withdraws_its_chunks(broker, workers, storage):
    name = workers.start(1, extra=("--cache-size", "400"))[0]
    chunks = make_chunks(REAL, step=20)
    list(imap_unordered(muon_pt_sum, chunks, broker=broker))
    again = list(imap_unordered(muon_pt_sum, chunks, broker=broker))
    assert sum(r.meta["bytes_file"] for r in again) > 0          # evicted, so read again
    held = {k.decode() for k in storage.r.smembers(storage.keys.holds(name))}
    assert len(held) < len(chunks)                                # evicted chunks withdrawn


def muon_eta_sum(chunk):
    import awkward as ak
    return float(ak.sum(chunk.arrays(["Muon_eta"], how=dict)["Muon_eta"]))


@needs_nanoaod
@pytest.mark.parametrize("limit, reopened", [(2, 4), (16, 0)])
def test_a_worker_keeps_at_most_rhtc_open_files_open(broker, workers, tmp_path, limit, reopened):
    """Four files, one chunk each, through one worker: with room for 16 open files a second
    branch opens none; with room for 2, cycling through 4 files opens each one again. A
    chunk whose branches are all in the cache needs no open file (its stamp is checked)."""
    import shutil
    from rhtc import last_map, remote_map
    paths = []
    for i in range(4):
        paths.append(str(tmp_path / f"dy{i}.root"))
        shutil.copy(NANOAOD / "nano_dy.root", paths[-1])
    workers.start(1, env={"RHTC_OPEN_FILES": str(limit)})
    chunks = make_chunks(paths, step=10 ** 6)
    assert len(chunks) == 4
    opened = []
    for fn in (muon_pt_sum, muon_eta_sum, muon_pt_sum):
        remote_map(fn, chunks, broker=broker, progress=False, routing=False, timeout=60)
        opened.append(sum(t.files_opened for t in last_map().record().tasks))
    assert opened == [4, reopened, 0]


# -- reduction ----------------------------------------------------------------------------------

@pytest.mark.quick  # smoke: a reduce over chunks of real NanoAOD
def test_reduce_combines_histograms_counts_and_dicts(broker, workers):
    workers.start(2)
    chunks = make_chunks(REAL, step=4)
    total = remote_map(dimuon, chunks, broker=broker, reduce=True, progress=False)
    parts = [dimuon(c) for c in chunks]                    # the same, one by one, here
    assert total["events"] == 80 == sum(p["events"] for p in parts)
    assert np.array_equal(total["mass_z"].values(), sum(p["mass_z"].values() for p in parts))
    assert total["pairs"] == sum(p["pairs"] for p in parts) > 0
    # the Z: most in-window pairs sit between 80 and 100 GeV
    values, edges = total["mass_z"].values(), total["mass_z"].axes[0].edges
    assert values[(edges[:-1] >= 80) & (edges[:-1] < 100)].sum() > 0.6 * values.sum()


def test_reduce_with_custom_function_and_nested_values(broker, workers):
    workers.start(1)
    assert remote_map(lambda x: {"n": 1, "s": np.array([x, 1.0]), "t": (x, [x])}, range(5),
                      broker=broker, reduce=True, progress=False)["n"] == 5
    assert remote_map(abs, [-1, 5, -3], broker=broker, reduce=max, progress=False) == 5
    assert combine({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(TypeError, match="cannot combine"):
        combine("x", 1)
