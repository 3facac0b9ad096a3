"""Chunks of real NanoAOD, the worker's branch cache, sticky routing and reduction."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rhtc.client import RemoteError, imap_unordered, make_chunks, remote_map
from rhtc.client.data.chunks import BranchNotFound, ChunkFileError
from rhtc.client.reduce import combine
from rhtc.examples.dimuon import BRANCHES, dimuon
from tests.conftest import NANOAOD, ROOT, needs_nanoaod

REAL = [str(NANOAOD / "nano_dimuon.root"), str(NANOAOD / "nano_dy.root")]
pytestmark = needs_nanoaod


def muon_pt_sum(chunk):
    import awkward as ak
    a = chunk.arrays(["Muon_pt"], how=dict)
    return float(ak.sum(a["Muon_pt"]))


def test_make_chunks_covers_every_entry_once():
    chunks = make_chunks(REAL, step=7)
    import uproot
    for path in REAL:
        mine = [c for c in chunks if c.file == path]
        n = uproot.open(path)["Events"].num_entries
        assert mine[0].entry_start == 0 and mine[-1].entry_stop == n
        assert all(a.entry_stop == b.entry_start for a, b in zip(mine, mine[1:]))
        assert all(c.num_entries <= 7 for c in mine)
        assert len({c.uuid for c in mine}) == 1
    assert chunks[0].uuid != [c for c in chunks if c.file == REAL[1]][0].uuid


@pytest.mark.parametrize("bad, message", [
    ("/no/such/file.root", "no such file"),
    (__file__, "is not a ROOT file"),
])
def test_bad_files_are_named(bad, message):
    with pytest.raises(ChunkFileError, match=message) as info:
        make_chunks([REAL[0], bad])
    assert bad in str(info.value)


def test_missing_tree_lists_the_trees():
    with pytest.raises(ChunkFileError, match=r"has no tree 'Evnts'.*Events"):
        make_chunks(REAL[0], tree="Evnts")


def test_missing_branch_names_branch_file_and_similar_ones():
    chunk = make_chunks(str(NANOAOD / "scouting_nano.root"), step=100)[0]
    with pytest.raises(BranchNotFound) as info:
        chunk.arrays(["Muon_pt"])
    text = str(info.value)
    assert "'Muon_pt'" in text and "scouting_nano.root" in text and "ScoutingMuon_pt" in text


def test_missing_branch_on_a_worker_comes_back_as_remote_error(broker, workers):
    workers.start(1)
    chunks = make_chunks([REAL[0], str(NANOAOD / "scouting_nano.root")], step=100)
    out = remote_map(muon_pt_sum, chunks, broker=broker, progress=False, errors="return")
    assert isinstance(out[0], float)
    err = out[1]
    assert isinstance(err, RemoteError) and err.remote_type == "BranchNotFound"
    assert "scouting_nano.root" in str(err) and "ScoutingMuon_pt" in str(err)


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
        from tests.test_nanoaod import muon_pt_sum, REAL
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


def test_changed_file_is_detected(tmp_path):
    path = tmp_path / "f.root"
    shutil.copy(REAL[0], path)
    chunk = make_chunks(str(path), step=100)[0]
    shutil.copy(REAL[1], path)                              # same name, another file
    from rhtc.client.data import chunks as chunks_module
    chunks_module.close_files()                             # as a fresh process would
    with pytest.raises(ChunkFileError, match="has changed since the chunks were made"):
        chunk.arrays(["Muon_pt"])


def test_branches_match_what_the_example_reads():
    chunk = make_chunks(REAL[1], step=100)[0]
    arrays = chunk.arrays(BRANCHES, how=dict)
    assert set(arrays) == set(BRANCHES)
