"""XRootD errors and timeouts as documented, with a real server: a relative path the
server refuses (its error 3010) is told as a bad URL, not a credential problem; a missing
directory in a glob has a documented reason; ``XRD_REQUESTTIMEOUT`` is the one request
timeout, in a fresh process; a stalled server fails the task within the workers' request
timeout; coffea's reads over ``root://`` are retried in the task as ``Chunk.arrays``' are.

The README's "how long a stalled server takes to fail" are this module's figures: with
fsspec-xrootd's fixed 60 s, a stalled read took 71-110 s with ``XRD_REQUESTTIMEOUT=5``; now
at most three requests and the pauses between them.

Real parts: a real xrootd server (bench/xrootd_server.py, the fixtures of tests/kits/xrootd.py)
stalled with SIGSTOP, a real redis-server and worker processes, real NanoAOD files.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest

from rhtc.client import make_chunks, remote_map
from rhtc.client.data.chunks import ChunkFileError
from rhtc.client.errors import RemoteError
from rhtc.examples.dimuon import dimuon
from tests.conftest import ROOT, needs_nanoaod
from tests.helpers import poll_until, register_by_value

REAL = "nano_dy.root"

register_by_value(__name__)       # the functions sent to workers travel by value


try:
    import XRootD.client  # noqa: F401
    from tests.kits.xrootd import served, server  # noqa: F401  (fixtures)
except ImportError:                                # the XRootD tests below skip themselves
    pass


# -- what an XRootD error says -------------------------------------------------------------------

@needs_nanoaod
def test_a_relative_path_the_server_refuses_is_not_a_credential_problem(server):
    from XRootD import client
    from rhtc.client.data import xrootd
    url = f"root://127.0.0.1:{server.port}/{REAL}"          # straight to the server, no check of ours
    status, _ = client.File().open(url, timeout=10)
    assert not status.ok and "3010" in status.message, status.message
    reason, message = xrootd.explain(url, status.message)
    assert reason == "bad URL" and reason in ChunkFileError.REASONS
    assert "two slashes" in message and "credential" not in message and "voms" not in message


@needs_nanoaod
def test_a_missing_directory_in_a_glob_has_a_documented_reason(server):
    with pytest.raises(ChunkFileError) as info:
        make_chunks(server.url("no/such/dir/*.root"))
    assert info.value.reason == "no such file", str(info.value)
    assert "no/such/dir" in str(info.value)


# -- the timeout ---------------------------------------------------------------------------------

@pytest.mark.heavy
def test_xrd_requesttimeout_is_the_one_request_timeout():
    pytest.importorskip("XRootD.client", reason="the [xrootd] extra is not installed")
    code = ("from rhtc.client.data import xrootd; xrootd.apply_settings(); "
            "from fsspec_xrootd import XRootDFileSystem; "
            "print(xrootd.request_timeout(), XRootDFileSystem.default_timeout, xrootd.open_options()['timeout'])")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, XRD_REQUESTTIMEOUT="7"),
                         cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7", "7", "7"], out.stdout


@needs_nanoaod
@pytest.mark.slow
@pytest.mark.parametrize("timeout, connected", [("5", True), ("5", False), (None, False)])
def test_a_stalled_server_fails_the_task_within_the_workers_request_timeout(server, broker, workers,
                                                                           timeout, connected):
    """With XRD_REQUESTTIMEOUT=5 in the workers' environment, on a worker that has the file
    open (mid-map) or connects afresh, and with the defaults on one that connects afresh (each
    attempt ends at XRD_CONNECTIONWINDOW). That a worker's default request timeout is the 60 s
    every reader uses is the next test's: waiting out three requests of 60 s here took 3 min."""
    workers.start(1, env={"XRD_REQUESTTIMEOUT": timeout} if timeout else {})
    seconds = int(timeout or xrootd_settings()["XRD_REQUESTTIMEOUT"])
    chunks = make_chunks(server.url(REAL), step=20)
    if connected:                                            # the worker reads the file once
        remote_map(dimuon, chunks[:1], broker=broker.config, progress=False)
    os.kill(server.proc.pid, signal.SIGSTOP)                 # the server stalls: connections hang
    try:
        t = time.monotonic()
        out = remote_map(dimuon, chunks[1:], broker=broker.config, errors="return", progress=False)
        took = time.monotonic() - t
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    err = out[0]
    assert isinstance(err, RemoteError) and isinstance(err.exception, ChunkFileError), out
    assert err.exception.reason == "timed out", str(err)
    assert f"XRD_REQUESTTIMEOUT ({seconds} s)" in str(err) and "3 attempts" in str(err), str(err)
    print(f"a stalled server failed the task after {took:.0f} s with XRD_REQUESTTIMEOUT={seconds}, "
          f"{'connected' if connected else 'connecting'}")
    # at most three requests and the pauses between them; fsspec-xrootd's fixed 60 s made
    # it 71-110 s with XRD_REQUESTTIMEOUT=5
    assert took < 3 * seconds + 45, f"a stalled read took {took:.0f} s with XRD_REQUESTTIMEOUT={seconds}"


def request_timeouts(chunk) -> dict:
    """On a worker, after it read ``chunk`` over root://: the request timeout of each reader."""
    from fsspec_xrootd import XRootDFileSystem
    from XRootD import client

    from rhtc.client.data import xrootd
    chunk.arrays(["nMuon"])
    return {"XRD_REQUESTTIMEOUT": os.environ.get("XRD_REQUESTTIMEOUT"),
            "XrdCl": client.EnvGetInt("RequestTimeout"), "fsspec-xrootd": XRootDFileSystem.default_timeout,
            "uproot's open": xrootd.open_options()["timeout"], "the advice": xrootd.request_timeout()}


@needs_nanoaod
def test_a_workers_default_request_timeout_is_every_readers(server, broker, workers, monkeypatch):
    """A worker started without XRD_REQUESTTIMEOUT reads root:// with the default of SETTINGS
    (60 s) in XrdCl, fsspec-xrootd, uproot's open and the advice its errors give: the bound
    the stalled-server test shows with 5 s holds at the default."""
    monkeypatch.delenv("XRD_REQUESTTIMEOUT", raising=False)
    workers.start(1)
    chunk = make_chunks(server.url(REAL), step=20)[0]
    [got] = remote_map(request_timeouts, [chunk], broker=broker.config, progress=False)
    default = int(xrootd_settings()["XRD_REQUESTTIMEOUT"])
    assert got == {"XRD_REQUESTTIMEOUT": str(default), "XrdCl": default, "fsspec-xrootd": default,
                   "uproot's open": default, "the advice": default}, got


def xrootd_settings() -> dict:
    from rhtc.client.data.xrootd import SETTINGS
    return SETTINGS


@needs_nanoaod
def test_coffea_reads_over_root_retry_in_the_task_like_chunk_arrays(server, broker, storage, workers):
    pytest.importorskip("coffea")
    from coffea import processor
    from coffea.nanoevents import NanoAODSchema
    from rhtc.client.coffea import RedisExecutor
    from tests.kits.coffea import count_processor
    workers.start(1, env={"RHTC_XROOTD_RETRIES": "5"})      # pauses 0.5, 1, 2, 4, 8 s
    url = server.url(REAL)
    server.kill()
    run = processor.Runner(executor=RedisExecutor(broker=broker.config, status=False),
                           schema=NanoAODSchema, chunksize=20)
    out: dict = {}

    def go():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out["value"] = run({"dy": [url]}, processor_instance=count_processor(), treename="Events")
            except Exception as err:                          # handed to the test below
                out["error"] = err
    thread = threading.Thread(target=go)
    thread.start()
    # until the first read is failing (a worker is busy with it), or the run has given up
    poll_until(lambda: "error" in out or any(w["state"] == "busy" for w in storage.pool.live_workers()), 60)
    time.sleep(2)
    server.start()                                            # the same port: the retries reach it
    thread.join(180)
    assert not thread.is_alive()
    assert "error" not in out, f"coffea's read was not retried in the task: {out.get('error')}"
    assert out["value"] == {"n": 40}
