"""dask.distributed's side of ``bench dimuon``, run in a child process of its own, so that
it runs alone, can be bounded in time, and cannot take the benchmark down with it.

The child starts a dask LocalCluster (one single-threaded process per worker), runs the
same warm-up and the same dimuon function over the same chunks, cold then warm, with a
worker-global branch cache of the same size as ours, and prints one JSON line per event
(workers up, tasks done, a run measured). The parent (:func:`run_dask`) shows progress
bars, keeps each phase within its bound, and on overrun stops the child's whole process
group by the child's pid and returns one line saying what failed and what to try.

    (not run by the tests: a minute of dask; tests/scenarios/test_bench_peer_that_cannot_start.py runs it)
    >>> out = run_dask(chunks, warm, workers=2, cache_bytes=2**30)     # doctest: +SKIP
    >>> out["cold_s"], out["warm_s"]                                     # doctest: +SKIP
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time

from rhtc import context
from ..examples.dimuon import dimuon
from ..worker.cache import BranchCache
from ..worker.memory import tune_malloc


def warm_up(chunk):
    """Run the analysis once on a tiny file of its own, so that the cold run measures
    reading the data, not importing and first-use set-up of uproot, awkward and hist
    (both systems and the bare loop get the same warm-up)."""
    dimuon(chunk)
    time.sleep(0.05)                     # keep each worker busy long enough to get one
    return os.getpid()


def dask_dimuon(chunk):
    """The same analysis on a dask worker, with a process-global cache of the same size
    as ours, reached the same way (so dask gets its fair chance)."""
    if context.current is None:
        tune_malloc()                   # as our workers do
        context.current = context.TaskContext(worker=f"dask-{os.getpid()}",
                                              cache=BranchCache(int(os.environ["BENCH_DASK_CACHE_BYTES"])))
    return dimuon(chunk)


def _n_workers(dask_scheduler=None) -> int:
    return len(dask_scheduler.workers)


def _emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def _child(spec_path: str) -> None:
    """The child process: start dask, run cold and warm, report each step on stdout."""
    from dask.distributed import Client, LocalCluster, as_completed
    from ..client.reduce import combine
    with open(spec_path, "rb") as fh:
        spec = pickle.load(fh)
    chunks, warm, n = spec["chunks"], spec["warm"], spec["workers"]
    t = time.perf_counter()
    with LocalCluster(n_workers=0, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        cluster.scale(n)
        seen = -1
        while (up := client.run_on_scheduler(_n_workers)) < n:
            if up != seen:
                _emit(event="workers", up=up)
                seen = up
            time.sleep(0.25)
        _emit(event="started", startup_s=time.perf_counter() - t, workers=n)
        client.gather(client.map(warm_up, warm * n * 3, pure=False))
        _emit(event="warmed")
        for phase in ("cold", "warm"):
            t = time.perf_counter()
            total, done = None, 0
            for fut in as_completed(client.map(dask_dimuon, chunks, pure=False)):
                total = combine(total, fut.result())
                done += 1
                _emit(event="done", n=done)
            _emit(event=phase, seconds=time.perf_counter() - t, events=total["events"], pairs=total["pairs"])


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group (dask's scheduler, nannies, workers), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    try:                                 # leftover grandchildren of the group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_dask(chunks, warm, *, workers: int, cache_bytes: int, start_bound: float | None = None,
             run_bound: float = 600.0, progress: bool = True) -> dict:
    """Dask's cold and warm runs in a child process, each phase within its bound.

    Returns ``{"workers", "startup_s", "cold_s", "warm_s", "cold_events", ...}``, or, when
    a phase overran or failed, what was measured so far plus ``"error"``: one line.
    """
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return {"error": "dask.distributed is not installed (pip install 'redis-htcondor[bench]')"}
    from tqdm import tqdm
    start_bound = start_bound or 60.0 + 2.0 * workers
    spec = tempfile.NamedTemporaryFile(prefix="rhtc-dask-", suffix=".pkl", delete=False)
    with spec:
        pickle.dump({"chunks": chunks, "warm": warm, "workers": workers}, spec)
    log = tempfile.NamedTemporaryFile(prefix="rhtc-dask-", suffix=".log", delete=False)
    env = dict(os.environ, BENCH_DASK_CACHE_BYTES=str(cache_bytes))
    proc = subprocess.Popen([sys.executable, "-c", f"from rhtc.bench.dimuon_dask import _child; _child({spec.name!r})"],
                            stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True, text=True)
    out: dict = {"workers": workers}
    phase, bound, t0 = "start", start_bound, time.monotonic()
    bar = tqdm(total=workers, desc=f"dask: starting {workers} workers", unit="worker", disable=not progress,
               leave=False)
    try:
        while True:
            left = t0 + bound - time.monotonic()
            if left <= 0:
                what = (f"{bar.n} of {workers} workers were up" if phase == "start" else
                        "its workers were still importing" if phase == "warm-up" else
                        f"{bar.n} of {len(chunks)} chunks were done in its {phase} run")
                doing = {"start": "start", "warm-up": "finish its warm-up"}.get(phase, f"finish its {phase} run")
                out["error"] = (f"dask did not {doing} "
                                f"within {bound:.0f} s ({what}); try fewer dask workers, e.g. "
                                f"--dask-workers {max(1, min(workers // 4, 2 * (os.cpu_count() or 1)))}")
                return out
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
            if not ready:
                continue
            line = proc.stdout.readline()
            if not line:
                proc.wait(10)
                tail = open(log.name, errors="replace").read().strip().splitlines()[-3:]
                out["error"] = (f"dask exited with code {proc.returncode} during its {phase} phase after "
                                f"{time.monotonic() - t0:.0f} s: {' | '.join(tail)[-400:]}; "
                                f"try fewer dask workers (--dask-workers)")
                return out
            msg = json.loads(line)
            if msg["event"] == "workers":
                bar.n = msg["up"]
                bar.refresh()
            elif msg["event"] == "started":
                out["startup_s"] = msg["startup_s"]
                phase, t0 = "warm-up", time.monotonic()            # bound: as for the start
                bar.close()
                bar = tqdm(total=0, desc="dask: warm-up (imports on every worker)", disable=not progress, leave=False)
            elif msg["event"] == "warmed":
                phase, bound, t0 = "cold", run_bound, time.monotonic()
                bar.close()
                bar = tqdm(total=len(chunks), desc="dask cold", unit="chunk", disable=not progress, leave=False)
            elif msg["event"] == "done":
                bar.n = msg["n"]
                bar.refresh()
            elif msg["event"] in ("cold", "warm"):
                out[f"{msg['event']}_s"] = msg["seconds"]
                out[f"{msg['event']}_events"] = msg["events"]
                out[f"{msg['event']}_pairs"] = msg["pairs"]
                if msg["event"] == "warm":
                    return out
                phase, t0 = "warm", time.monotonic()
                bar.close()
                bar = tqdm(total=len(chunks), desc="dask warm", unit="chunk", disable=not progress, leave=False)
    finally:
        bar.close()
        _stop(proc)
        proc.stdout.close()
        log.close()
        for path in (spec.name, log.name):
            try:
                os.unlink(path)
            except OSError:
                pass
