"""A pool that keeps itself (``rhtc pool start``, condor/keeper.py) on the real pools: the
tests' HTCondor pool (minicondor in a chroot) and Slurm cluster. The keeper runs as the
analyst runs it, a process on the submit node that looks every second; the faults are the
batch system's own commands (condor_hold, condor_rm, condor_vacate_job, scancel, scontrol).

Bounds stated here: on these pools a held, removed or vacated worker job is replaced (the
pool is back at N serving) within 120 s, and a job held after its worker served is never a
failed start-up, even when no look of the keeper fell while it ran; a broken environment stops the keeper after
``--max-failures`` start-up failures, within 180 s.
"""
from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rhtc.broker.storage import Storage

from tests.kits.credentials import make_proxy, make_token
from tests.pools.fixtures import job_logs, make_owned_dir, python_cmd, rhtc_env, write_pool_config

pytestmark = pytest.mark.pool
REPLACED_WITHIN = 120.0


def _keeper(args: list[str], env: dict, cwd: Path, out: Path) -> subprocess.Popen:
    with open(out, "w") as fh:
        return subprocess.Popen([*python_cmd(), "pool", "start", "--interval", "1s", *args], env=env, cwd=cwd,
                                stdout=fh, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen, storage: Storage, name: str) -> int:
    """``rhtc pool stop NAME``, as the analyst stops it; the keeper's exit code."""
    stopped = subprocess.run([*python_cmd(), "pool", "stop", name, "--no-wait"], capture_output=True, text=True,
                             env={**rhtc_env(), **storage.config.env()}, timeout=60)
    assert stopped.returncode == 0 and f"asked pool {name}" in stopped.stdout, stopped.stderr
    try:
        return proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def _serving(storage: Storage, prefix: str) -> list[str]:
    return sorted(s.name for s in storage.pool.worker_statuses(queue_depths=False) if s.name.startswith(prefix))


def _wait(predicate, timeout: float, what: str, proc=None, out: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the keeper exited ({proc.returncode}) while waiting for {what}:\n"
                                 f"{out.read_text()[-3000:] if out else ''}")
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n"
                         f"{out.read_text()[-3000:] if out else ''}")


def test_bench_pool_heals_holds_removes_vacates_and_drains(condor_pool, pool_broker, condor_env_pack,
                                                           pool_analyst, monkeypatch, capsys):
    """``bench pool`` on the test pool at N=2: the figures it prints are the README's, and
    the behaviour behind them is asserted here."""
    from rhtc.bench.pool import measure, table
    from rhtc.client.ops.status import render_pools
    work = condor_pool.workdir("keeper_bench")
    cfg = write_pool_config(pool_broker, work)
    monkeypatch.setenv("CONDOR_CONFIG", str(condor_pool.host_condor_config))
    monkeypatch.setenv("PYTHONPATH", rhtc_env()["PYTHONPATH"])
    storage = Storage(pool_broker.config)
    seen: dict = {}

    def probe(step: str) -> None:           # what `rhtc status` shows right after each fault is healed
        seen[step] = render_pools(storage, events=20)

    def run_map(n: int, seconds: float, log: str) -> list:
        return pool_analyst(cfg, "sleeps", log, str(n), str(seconds), timeout=600)["values"]
    try:
        out = measure(cfg, condor_env_pack, work, workers=2, run_map=run_map, lifetime=60, probe=probe,
                      timeout=REPLACED_WITHIN)
    finally:
        storage.close()
    with capsys.disabled():
        print("\n" + table(out))
    assert "held: " in seen["hold"] and "replaced" in seen["hold"], seen["hold"]
    assert "removed" in seen["remove"] and "replaced" in seen["remove"], seen["remove"]
    assert "evicted" in seen["vacate"], seen["vacate"]
    assert out["vacate_map_once"], "the map across condor_vacate_job returned every result once"
    assert out["drain_once"] and out["drain_lost"] == 0 and out["drain_rerun"] == 0, out
    assert out["drain_left"] >= 2, "the first workers drained and left at the end of their lifetime"
    assert out["drain_jobs"] > 2, "replacement jobs ran tasks after the first ones left"
    assert out["drain_fewest_serving"] >= 2, ("the pool size held across the drain; it fell (s into the map, "
                                              f"workers serving): {out['drain_dips']}; the keeper's events: "
                                              f"{out['drain_events']}")
    assert out["heal_keeper_exit"] == 0 and out["drain_keeper_exit"] == 0


def test_adaptive_pool_grows_with_the_work_and_shrinks_to_its_minimum(condor_pool, pool_broker, condor_env_pack,
                                                                      pool_analyst, monkeypatch):
    from rhtc.condor.batch import CondorBatch, job_of_worker
    monkeypatch.setenv("CONDOR_CONFIG", str(condor_pool.host_condor_config))
    work = condor_pool.workdir("keeper_adapt")
    cfg = write_pool_config(pool_broker, work)
    logs = make_owned_dir(work / "logs")
    env = condor_pool.host_env(rhtc_env())
    out = work / "keeper.out"
    proc = _keeper(["--adapt", "1:3", "--name", "adapt", "--shrink-after", "4s", "--config", str(cfg),
                    "--env", str(condor_env_pack), "--log-dir", str(logs)], env, work, out)
    storage = Storage(pool_broker.config)
    batch = CondorBatch("adapt", {})

    def ours() -> list[str]:               # the pool's serving workers (not those of earlier tests)
        jobs = set(batch.jobs())
        return [n for n in _serving(storage, "condor-") if job_of_worker(n) in jobs]
    try:
        _wait(lambda: len(ours()) >= 1, REPLACED_WITHIN, "the minimum of 1 worker", proc, out)
        result: dict = {}
        mapper = threading.Thread(target=lambda: result.update(
            pool_analyst(cfg, "sleeps", str(work / "runs.jsonl"), "40", "1.5", timeout=600)))
        mapper.start()
        most = 0
        while mapper.is_alive():
            most = max(most, len(ours()))
            time.sleep(0.5)
        assert result["values"] == list(range(40))
        assert most == 3, f"the pool grew from 1 to its maximum of 3 while tasks waited (saw {most})"
        _wait(lambda: len(ours()) == 1 and len(batch.jobs()) == 1, REPLACED_WITHIN,
              "idle workers to leave down to the minimum", proc, out)
        events = storage.pool.keeper_events("adapt", 50)
        assert any(e["what"] == "removed" and "the pool shrinks" in e["why"] for e in events), events
    finally:
        code = _stop(proc, storage, "adapt")
        storage.close()
    assert code == 0, out.read_text()


def test_a_broken_environment_stops_the_keeper_with_the_cause_and_the_fix(condor_pool, pool_broker):
    work = condor_pool.workdir("keeper_broken")
    cfg = write_pool_config(pool_broker, work)
    logs = make_owned_dir(work / "logs")
    bad = work / "rhtc-env.tar.gz"
    bad.write_bytes(gzip.compress(b"not a tar archive"))
    env = condor_pool.host_env(rhtc_env())
    out = work / "keeper.out"
    proc = _keeper(["--workers", "2", "--name", "broken", "--max-failures", "2", "--config", str(cfg),
                    "--env", str(bad), "--log-dir", str(logs)], env, work, out)
    try:
        code = proc.wait(180)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the keeper resubmitted for 180 s instead of stopping:\n{out.read_text()[-3000:]}")
    text = out.read_text()
    assert code == 1, text
    assert "failed at start-up" in text and "cannot unpack" in text and "rhtc pack --rebuild" in text, text
    assert "Traceback" not in text, text
    assert not condor_pool.jobs('RhtcPool == "broken"'), "the keeper removed its jobs when it stopped"


def test_a_job_idle_in_the_queue_past_the_limit_is_replaced(condor_pool, pool_broker, condor_env_pack):
    work = condor_pool.workdir("keeper_idle")
    cfg = write_pool_config(pool_broker, work)
    logs = make_owned_dir(work / "logs")
    env = condor_pool.host_env(rhtc_env())
    out = work / "keeper.out"
    proc = _keeper(["--workers", "1", "--name", "idlejobs", "--idle-limit", "4s", "-a", "requirements = false",
                    "--config", str(cfg), "--env", str(condor_env_pack), "--log-dir", str(logs)], env, work, out)
    storage = Storage(pool_broker.config)
    try:
        replaced = _wait(lambda: [e for e in storage.pool.keeper_events("idlejobs", 50)
                                  if e["what"] == "replaced" and "idle in the queue" in e["why"]],
                         REPLACED_WITHIN, "a job idle past the limit to be replaced", proc, out)
        first = replaced[-1]["job"]
        cluster, proc_id = first.split(".")
        _wait(lambda: not condor_pool.jobs(f"ClusterId == {cluster} && ProcId == {proc_id}"), 60,
              "the idle job to be removed")
    finally:
        code = _stop(proc, storage, "idlejobs")
        storage.close()
    assert code == 0, out.read_text()
    _wait(lambda: not condor_pool.jobs('RhtcPool == "idlejobs"'), 60, "the keeper's jobs to leave the queue")


def test_a_job_held_after_its_first_task_between_two_looks_is_replaced_as_no_failed_start(
        condor_pool, pool_broker, condor_env_pack, pool_analyst, monkeypatch):
    """Whether a job served comes from the broker, not from the keeper's looks. The
    keeper is paused (SIGSTOP) from the moment it has submitted its job until that job's
    worker has served a task, been held (condor_hold) and left the broker: its next look
    finds a held job and no heartbeat. With ``--max-failures 1``, one start-up failure would
    stop the pool; the job is replaced at once instead, and counted as no failure."""
    from rhtc.condor.batch import CondorBatch, job_of_worker
    monkeypatch.setenv("CONDOR_CONFIG", str(condor_pool.host_condor_config))
    work = condor_pool.workdir("keeper_held_served")
    cfg = write_pool_config(pool_broker, work)
    logs = make_owned_dir(work / "logs")
    env = condor_pool.host_env(rhtc_env())
    out = work / "keeper.out"
    proc = _keeper(["--workers", "1", "--name", "heldserved", "--max-failures", "1", "--config", str(cfg),
                    "--env", str(condor_env_pack), "--log-dir", str(logs)], env, work, out)
    storage = Storage(pool_broker.config)
    batch = CondorBatch("heldserved", {})

    def status_of(job: str):
        return next((s for s in storage.pool.worker_statuses(queue_depths=False) if job_of_worker(s.name) == job), None)
    try:
        first = _wait(lambda: sorted(batch.jobs()), REPLACED_WITHIN, "the keeper to submit its job", proc, out)[0]
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            _wait(lambda: status_of(first), REPLACED_WITHIN, f"job {first}'s worker to serve")
            assert pool_analyst(cfg, "sleeps", str(work / "runs.jsonl"), "1", "0.1")["values"] == [0]
            _wait(lambda: getattr(status_of(first), "tasks_done", 0) >= 1, 30,
                  "its worker's heartbeat to count the map's task")
            condor_pool.run(["condor_hold", first])
            _wait(lambda: batch.jobs().get(first) and batch.jobs()[first].state == "held"
                  and status_of(first) is None, 60, f"job {first} held and its worker gone from the broker")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        _wait(lambda: [j for j in batch.jobs() if j != first and status_of(j)], REPLACED_WITHIN,
              "the replacement's worker to serve", proc, out)
        events = storage.pool.keeper_events("heldserved", 50)
        whys = " | ".join(f"{e['what']} {e['job']} {e['why']}" for e in events)
        assert any(e["what"] == "replaced" and e["job"] == first and e["why"].startswith("held: via condor_hold")
                   for e in events), whys
        assert not [e for e in events if e["what"] == "failed"], f"a job that served failed at start-up: {whys}"
        state = next(k for k in storage.pool.keepers() if k["pool"] == "heldserved")
        assert state["failures"] == 0 and state["backoff"] == 0, state
    finally:
        code = _stop(proc, storage, "heldserved")
        storage.close()
    assert code == 0, out.read_text()
    _wait(lambda: not condor_pool.jobs('RhtcPool == "heldserved"'), 60, "the keeper's jobs to leave the queue")


def test_slurm_pool_replaces_cancelled_and_held_jobs(slurm_pool, pool_broker, tmp_path):
    cfg = pool_broker.config.write(tmp_path / "broker.json")
    logs = tmp_path / "logs"
    env = slurm_pool.env(rhtc_env())
    out = tmp_path / "keeper.out"
    proc = _keeper(["--workers", "2", "--scheduler", "slurm", "--name", "slurmpool", "--config", str(cfg),
                    "--python", sys.executable, "--log-dir", str(logs)], env, tmp_path, out)
    storage = Storage(pool_broker.config)
    try:
        first = _wait(lambda: (lambda s: s if len(s) == 2 else None)(_serving(storage, "slurm-")), REPLACED_WITHIN,
                      "2 slurm workers", proc, out)
        jobs = [n.split("@")[0][len("slurm-"):] for n in first]
        subprocess.run(["scancel", jobs[0]], env=env, check=True, timeout=60)
        subprocess.run(["scontrol", "requeuehold", jobs[1]], env=env, check=True, timeout=60)
        _wait(lambda: len(set(_serving(storage, "slurm-")) - set(first)) == 2, REPLACED_WITHIN,
              "both jobs replaced", proc, out)
        events = storage.pool.keeper_events("slurmpool", 50)
        whys = " | ".join(f"{e['what']} {e['job']} {e['why']}" for e in events)
        assert f"replaced {jobs[0]} removed" in whys, whys
        assert f"replaced {jobs[1]} held: job requeued in held state" in whys, whys
    finally:
        code = _stop(proc, storage, "slurmpool")
        storage.close()
    assert code == 0, out.read_text()
    _wait(lambda: not subprocess.run(["squeue", "--noheader", "--name=rhtc-worker"], capture_output=True, text=True,
                                     env=env, timeout=60).stdout.strip(), 60, "the keeper's jobs to leave the queue")


def test_the_analysts_proxy_and_token_reach_the_job_with_mode_0600(condor_pool, pool_broker, condor_env_pack,
                                                                   monkeypatch):
    """``rhtc submit`` finds X509_USER_PROXY and BEARER_TOKEN_FILE: the proxy goes HTCondor's way
    (use_x509userproxy), the token is transferred; the worker finds both, 0600, with their
    expiry; the token's text is in no job ad, argv, environment or log."""
    from rhtc.condor import submit_workers
    from tests.pools.common import pids_with_env
    work = condor_pool.workdir("credentials")
    cfg = write_pool_config(pool_broker, work)
    logs = make_owned_dir(work / "logs")
    token, proxy = work / "bt_u2000", work / "x509up_u2000"
    secret = make_token(token, expires := time.time() + 7200)
    make_proxy(proxy)
    for f in (token, proxy):
        os.chown(f, 2000, 2000)              # the jobs' user: the shadow reads them as that user
    monkeypatch.setenv("CONDOR_CONFIG", str(condor_pool.host_condor_config))
    monkeypatch.setenv("BEARER_TOKEN_FILE", str(token))
    monkeypatch.setenv("X509_USER_PROXY", str(proxy))
    monkeypatch.chdir(work)
    jobs = submit_workers(1, config_file=cfg, env_pack=condor_env_pack, log_dir=logs)
    storage = Storage(pool_broker.config)
    try:
        try:
            status = _wait(lambda: next((s for s in storage.pool.worker_statuses()
                                         if s.name.startswith(f"condor-{jobs.job_id}.0@")), None),
                           REPLACED_WITHIN, "the worker")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{condor_pool.jobs(f'ClusterId == {jobs.job_id}')}\n{job_logs(logs)}") from None
        cred = status.credential
        assert set(cred) == {"bearer token", "x509 proxy"}, cred
        assert cred["bearer token"]["mode"] == "0600" and cred["x509 proxy"]["mode"] == "0600", cred
        assert cred["bearer token"]["expires"] == int(expires)
        assert abs(cred["x509 proxy"]["expires"] - (time.time() + 86400)) < 3600, cred
        ads = condor_pool.run(["condor_q", "-allusers", "-l", jobs.job_id], user=None).stdout
        assert "x509userproxy" in ads.lower() and secret not in ads
        pids = pids_with_env("RHTC_CONDOR_JOB", f"{jobs.job_id}.0")
        assert pids
        for pid in pids:
            for what in ("environ", "cmdline"):
                try:
                    assert secret not in Path(f"/proc/{pid}/{what}").read_bytes().decode(errors="replace")
                except FileNotFoundError:
                    pass
    finally:
        jobs.remove()
        storage.close()
    _wait(lambda: not condor_pool.jobs(f"ClusterId == {jobs.job_id}"), 90, "the job to leave")
    for f in logs.rglob("*"):
        assert secret not in f.read_text(errors="replace"), f
