"""NanoAOD over root:// from a real xrootd server (Debian's xrootd-server, installed with
apt-get by the fixture when missing: tests/kits/xrootd.py), started on a free port as an
unprivileged user and stopped by its pid: the same histograms as from the local files, a
rerun routed home that reads nothing from the server, a server killed mid-map or down
while a map is retried, bad URLs and a file changed on the server named before any task."""
from __future__ import annotations

import functools
import os
import shutil
import time

import numpy as np
import pytest

from rhtc.bench.xrootd_server import XRootDServer, XRootDUnavailable
from rhtc.client import imap_unordered, make_chunks, remote_map
from rhtc.client.data.chunks import ChunkFileError
from rhtc.client.errors import RemoteError
from rhtc.examples.dimuon import dimuon
from tests.conftest import map_keys, needs_nanoaod
from tests.helpers import wait_until
from tests.kits.xrootd import REAL, served, server  # noqa: F401  (fixtures)

pytest.importorskip("XRootD.client", reason="the [xrootd] extra is not installed")
pytestmark = [needs_nanoaod, pytest.mark.timeout(300)]


def test_dimuon_over_root_equals_the_local_files(server, served, broker, workers):
    workers.start(2)
    remote = make_chunks(server.url("nano_d*.root"), step=7)           # a glob through the listing
    local = make_chunks([str(served / n) for n in REAL[:2]], step=7)
    assert [c.file for c in remote][::6] == [server.url(n) for n in REAL[:2]]
    assert [(c.uuid, c.entry_start, c.entry_stop) for c in remote] == \
        [(c.uuid, c.entry_start, c.entry_stop) for c in local]
    far = remote_map(dimuon, remote, broker=broker, reduce=True, progress=False)
    near = remote_map(dimuon, local, broker=broker, reduce=True, progress=False)
    assert far["events"] == near["events"] == 80 and far["pairs"] == near["pairs"] > 0
    for name in ("mass_z", "mass_wide"):
        assert np.array_equal(far[name].values(), near[name].values())


def test_rerun_is_routed_home_and_reads_nothing_from_the_server(server, broker, workers):
    workers.start(2)
    chunks = make_chunks([server.url(n) for n in REAL[:2]], step=20) + make_chunks(server.url("gen/*.root"), step=1000)
    first = {r.index: r for r in imap_unordered(dimuon, chunks, broker=broker)}
    assert all(r.error is None and r.meta["bytes_file"] > 0 for r in first.values())
    second = {r.index: r for r in imap_unordered(dimuon, chunks, broker=broker)}
    home = [i for i in second if second[i].meta["worker"] == first[i].meta["worker"]]
    assert len(home) >= len(chunks) - 2            # an idle worker may steal one or two
    assert all(second[i].meta["bytes_file"] == 0 and second[i].meta["bytes_cache"] > 0 for i in home)
    assert [second[i].value["events"] for i in second] == [first[i].value["events"] for i in second]


def slow_dimuon(chunk):
    time.sleep(0.3)
    return dimuon(chunk)


def test_server_killed_mid_map_fails_naming_the_url_then_a_rerun_works(server, broker, workers):
    workers.start(2, env={"RHTC_XROOTD_RETRIES": "0"})
    chunks = make_chunks(server.url("gen/*.root"), step=200)              # 30 chunks
    url = chunks[0].file
    t = time.monotonic()
    results = []
    for r in imap_unordered(slow_dimuon, chunks, broker=broker):
        results.append(r)
        if len(results) == 4:
            server.kill()
    assert time.monotonic() - t < 120, "the map hung after the server died"
    failed = [r for r in results if r.error is not None]
    assert len(results) == len(chunks) and failed
    for r in failed:
        assert r.error.remote_type == "ChunkFileError" and url in str(r.error), str(r.error)
        assert "server unreachable" in str(r.error) or "timed out" in str(r.error), str(r.error)
    server.start()                                                        # the same port
    total = remote_map(dimuon, chunks, broker=broker, reduce=True, progress=False)
    assert total["events"] == 6000


def dimuon_noting_failures(failures_file: str, chunk):
    try:
        return dimuon(chunk)
    except ChunkFileError:
        with open(failures_file, "a") as fh:
            fh.write(f"{chunk}\n")
        raise


def test_retried_when_asked_while_the_server_comes_back(server, broker, workers, tmp_path):
    workers.start(2)                  # each read retries twice (0.5 s, 1 s back-off) by default
    chunks = make_chunks(server.url("gen/*.root"), step=500)
    failures = tmp_path / "failures"
    server.kill()
    from rhtc.client import submit
    h = submit(functools.partial(dimuon_noting_failures, str(failures)), chunks, broker=broker, reduce=True,
               retries=50, retry_on=(ChunkFileError,))
    wait_until(failures.exists, 60, "a task to fail while the server is down", interval=0.1)
    server.start()
    total = h.wait(120)
    assert total["events"] == 6000
    assert sum(m.get("retries", 0) for m in h.run.metas) > 0


@pytest.mark.parametrize("what, reason", [("missing", "no such file"), ("host", "server unreachable"),
                                          ("port", "server unreachable"), ("denied", "permission denied")])
def test_bad_urls_fail_in_make_chunks_before_any_task(server, served, storage, what, reason):
    if what == "denied":
        secret = served / "secret.root"
        shutil.copy(served / REAL[0], secret)
        secret.chmod(0o600)                        # the server runs as an unprivileged user
        if os.geteuid() != 0:
            pytest.skip("the server runs as this user and can read the file")
    url = {"missing": server.url("no/such.root"), "host": "root://no-such-host.invalid//a.root",
           "port": f"root://127.0.0.1:{_closed_port()}//a.root", "denied": server.url("secret.root")}[what]
    t = time.monotonic()
    try:
        with pytest.raises(ChunkFileError) as info:
            make_chunks([server.url(REAL[0]), url])
    finally:
        if what == "denied":
            (served / "secret.root").unlink()
    assert time.monotonic() - t < 30
    assert url in str(info.value) and info.value.reason == reason, str(info.value)
    assert map_keys(storage) == []


def test_a_file_changed_on_the_server_is_detected(server, served):
    target = served / "changing.root"
    shutil.copy(served / REAL[0], target)
    chunk = make_chunks(server.url("changing.root"), step=100)[0]
    shutil.copy(served / REAL[1], target)
    from rhtc.client.data.chunks import close_files
    close_files()
    try:
        with pytest.raises(ChunkFileError, match="has changed since the chunks were made") as info:
            chunk.arrays(["Muon_pt"])
    finally:
        target.unlink()
    assert info.value.reason == "changed" and server.url("changing.root") in str(info.value)


def test_a_remote_error_pickles_with_its_reason(server, broker, workers):
    workers.start(1)
    chunks = make_chunks(server.url(REAL[0]), step=100)
    server.kill()
    out = remote_map(dimuon, chunks, broker=broker, errors="return", progress=False)
    assert isinstance(out[0], RemoteError) and isinstance(out[0].exception, ChunkFileError)
    assert out[0].exception.reason == "server unreachable" and out[0].exception.transient


def _closed_port() -> int:
    from tests.pools.common import free_port
    return free_port()


def test_a_server_that_dies_of_a_signal_at_start_is_started_again(served, tmp_path, monkeypatch, capfd):
    """Debian's xrootd now and then dies of SIGSEGV before it listens (seen in CI as "xrootd
    exited with -11: (no log)"): the server is started again, and a binary that always dies
    is refused naming the signal."""
    real = shutil.which("xrootd")
    marker = tmp_path / "crashed-once"
    wrapper = tmp_path / "bin" / "xrootd"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nif [ ! -e {marker} ]; then touch {marker}; kill -SEGV $$; fi\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    with XRootDServer(served) as s:
        assert s.proc.poll() is None and marker.exists()
        files = make_chunks(s.url("nano_dimuon.root"), step=1000)
        assert files and files[0].file == s.url("nano_dimuon.root")
    assert "exited with -11" in capfd.readouterr().err
    wrapper.write_text("#!/bin/sh\nkill -SEGV $$\n")
    broken = XRootDServer(served)
    try:
        with pytest.raises(XRootDUnavailable, match=r"exited with -11.*3 starts"):
            broken.start()
    finally:
        broken.close()
