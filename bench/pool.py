"""``bench pool``: how fast a pool that keeps itself (``rhtc pool start``) reaches its size and
heals, measured on a real HTCondor pool.

In one run, with the keeper started as the analyst starts it (``python -m rhtc.condor pool
start``, looking every second):

* **start**: from starting the keeper to N workers serving;
* **hold**, **remove**, **vacate**: from ``condor_hold``, ``condor_rm`` and
  ``condor_vacate_job`` of one job (the vacate during a map) to N workers serving again,
  and whether the map got every result once;
* **drain**: a second pool whose workers have a short ``--lifetime``, through a map that
  outlasts it: tasks lost or run twice (must be 0), and the fewest workers serving while
  the workers drained and their replacements came (the size holds if it stays N).

The map runs through ``run_map(n, seconds, log) -> values`` (default: ``remote_map`` from this
process; the tests run it inside the pool with the workers' Python). ``log`` is a file every
run of a task appends to, so a task run twice shows.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import click


def sleep_and_log(arg):
    """Runs on a worker: sleeps, then appends (index, job, start, stop) to the log."""
    import json
    import os
    import time
    log, index, seconds = arg
    t0 = time.time()
    time.sleep(seconds)
    with open(log, "a") as fh:
        fh.write(json.dumps([index, os.environ.get("RHTC_CONDOR_JOB", "?"), t0, time.time()]) + "\n")
    return index


def _map_here(config_file: str) -> Callable:
    def run(n: int, seconds: float, log: str) -> list:
        from ..broker.wire.config import BrokerConfig
        from ..client import remote_map
        cfg = BrokerConfig.resolve(config_file=config_file)
        return remote_map(sleep_and_log, [(log, i, seconds) for i in range(n)], broker=cfg, progress=False)
    return run


class PoolRun:
    """One keeper subprocess and what the bench sees of its pool."""

    def __init__(self, name: str, workers: int, config_file: Path, env_pack: Path, log_dir: Path,
                 extra: tuple = (), env: dict | None = None):
        from ..broker.wire.config import BrokerConfig
        from ..broker.storage import Storage
        from ..condor.batch import CondorBatch
        self.name, self.workers = name, workers
        self.env = dict(os.environ if env is None else env)
        cmd = [sys.executable, "-m", "rhtc.condor", "pool", "start", "--workers", str(workers), "--name", name,
               "--config", str(config_file), "--env", str(env_pack), "--log-dir", str(log_dir),
               "--interval", "1s", *extra]
        self.out = open(Path(log_dir) / f"bench-keeper-{name}.out", "w")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT, env=self.env)
        self.t0 = time.monotonic()
        self.storage = Storage(BrokerConfig.resolve(config_file=str(config_file)))
        self.batch = CondorBatch(name, {})

    def serving(self, count_leaving: bool = True) -> list[str]:
        """Job ids of this pool whose worker is live (and not leaving, unless ``count_leaving``)."""
        from ..condor.batch import job_of_worker
        jobs = set(self.batch.jobs())
        return sorted(job_of_worker(s.name) for s in self.storage.pool.worker_statuses(queue_depths=False)
                      if job_of_worker(s.name) in jobs and (count_leaving or not s.leaving))

    def wait_serving(self, n: int, timeout: float, exclude=()) -> float:
        """Seconds until ``n`` workers serve (none of ``exclude``)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the keeper exited ({self.proc.returncode}): {self.output()}")
            if len(set(self.serving()) - set(exclude)) >= n:
                return time.monotonic() - t0
            time.sleep(0.25)
        raise TimeoutError(f"{n} workers of pool {self.name} did not serve within {timeout:.0f} s; "
                           f"serving {self.serving()}; keeper said: {self.output()}")

    def act(self, action: str, job: str) -> None:
        from ..condor import schedd
        htcondor2 = schedd.bindings()
        schedd.find_schedd().act(getattr(htcondor2.JobAction, action), [job], reason=f"bench pool: {action}")

    def output(self) -> str:
        self.out.flush()
        return Path(self.out.name).read_text()[-3000:]

    def events(self) -> list[dict]:
        return self.storage.pool.keeper_events(self.name, 200)

    def stop(self) -> int:
        self.storage.pool.request_keeper_stop(self.name, "bench pool")
        try:
            code = self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self.out.close()
        self.storage.close()
        return code


def _runs(log: Path) -> list[list]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def measure(config_file: Path, env_pack: Path, work: Path, workers: int = 3, run_map: Callable | None = None,
            lifetime: float = 45.0, timeout: float = 240.0, probe: Callable[[str], None] | None = None) -> dict:
    """The figures of one ``bench pool`` run (see the module); ``work`` is a directory the jobs
    can write; ``probe(step)`` is called when the pool has healed from "hold", "remove", "vacate"."""
    run_map = run_map or _map_here(str(config_file))
    probe = probe or (lambda step: None)
    out: dict = {"workers": workers}
    pool = PoolRun("bench-heal", workers, config_file, env_pack, work)
    try:
        out["start_s"] = pool.wait_serving(workers, timeout)
        held = pool.serving()[0]
        pool.act("Hold", held)
        out["hold_s"] = pool.wait_serving(workers, timeout, exclude=[held])
        probe("hold")
        removed = pool.serving()[0]
        pool.act("Remove", removed)
        out["remove_s"] = pool.wait_serving(workers, timeout, exclude=[removed])
        probe("remove")
        log = work / "vacate-runs.jsonl"
        n_tasks = 6 * workers
        result: dict = {}
        mapper = threading.Thread(target=lambda: result.update(values=run_map(n_tasks, 2.0, str(log))))
        mapper.start()
        time.sleep(3.0)
        victim = pool.serving()[0]
        t_vacate = time.monotonic()
        pool.act("Vacate", victim)
        while victim in pool.serving() and time.monotonic() - t_vacate < 60:   # its worker hands back, leaves
            time.sleep(0.25)
        pool.wait_serving(workers, timeout)               # ... and the job runs again (or is replaced)
        out["vacate_s"] = time.monotonic() - t_vacate
        probe("vacate")
        mapper.join(timeout)
        out["vacate_map_once"] = result.get("values") == list(range(n_tasks))
        out["heal_events"] = [e for e in pool.events() if e["what"] in ("replaced", "evicted", "failed")]
    finally:
        out["heal_keeper_exit"] = pool.stop()
    out.update(_drain(config_file, env_pack, work, workers, run_map, lifetime, timeout))
    return out


def _drain(config_file, env_pack, work: Path, workers: int, run_map: Callable, lifetime: float,
           timeout: float) -> dict:
    pool = PoolRun("bench-drain", workers, config_file, env_pack, work, extra=("--lifetime", f"{lifetime:.0f}s"))
    out: dict = {}
    try:
        pool.wait_serving(workers, timeout)
        log = work / "drain-runs.jsonl"
        seconds = 2.0
        n_tasks = int(workers * lifetime * 1.6 / seconds)      # outlasts every first worker's lifetime
        result: dict = {}
        mapper = threading.Thread(target=lambda: result.update(values=run_map(n_tasks, seconds, str(log))))
        mapper.start()
        fewest, dips, t0 = workers, [], time.monotonic()
        while mapper.is_alive():
            serving = len(pool.serving(count_leaving=True))
            fewest = min(fewest, serving)
            if serving < workers:                   # when, and how far: with the keeper's events, why
                dips.append((round(time.monotonic() - t0, 1), serving))
            time.sleep(0.5)
        mapper.join()
        runs = _runs(log)
        indices = [r[0] for r in runs]
        out.update(drain_tasks=n_tasks, drain_once=result.get("values") == list(range(n_tasks)),
                   drain_lost=n_tasks - len(set(indices)), drain_rerun=len(indices) - len(set(indices)),
                   drain_fewest_serving=fewest, drain_dips=dips[:40],
                   drain_events=[(e.get("what"), e.get("job"), e.get("why")) for e in pool.events()][:40],
                   drain_left=sum(1 for e in pool.events() if e["what"] == "left"),
                   drain_jobs=len({r[1] for r in runs}))
    finally:
        out["drain_keeper_exit"] = pool.stop()
    return out


def table(out: dict) -> str:
    """The figures as the README quotes them."""
    w = out["workers"]
    rows = [("keeper start -> %d workers serving" % w, f"{out['start_s']:.1f} s"),
            ("condor_hold of one job -> %d serving again" % w, f"{out['hold_s']:.1f} s"),
            ("condor_rm of one job -> %d serving again" % w, f"{out['remove_s']:.1f} s"),
            ("condor_vacate_job mid-map -> %d serving again" % w, f"{out['vacate_s']:.1f} s"),
            ("map across the vacate: every result once", str(out["vacate_map_once"])),
            (f"drain: {out['drain_tasks']} tasks through workers of a short lifetime, {out['drain_left']} "
             "left", f"{out['drain_lost']} lost, {out['drain_rerun']} run twice"),
            ("drain: fewest workers serving while they were replaced", f"{out['drain_fewest_serving']} of {w}")]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{a:<{width}}  {b}" for a, b in rows)


@click.command()
@click.option("--workers", default=3, show_default=True, help="The pool's size.")
@click.option("--config", "config_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The broker config the workers read (0600).")
@click.option("--env", "env_pack", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The worker environment (`rhtc pack`), for the nodes' Python; the client must run the same.")
@click.option("--work", default="rhtc-bench-pool", show_default=True,
              help="A directory on a filesystem the jobs see (logs, the tasks' run log).")
@click.option("--lifetime", default=45.0, show_default=True, help="The drain pool's worker lifetime (s).")
def pool_command(workers, config_file, env_pack, work, lifetime):
    """A pool that keeps itself, on the HTCondor pool of CONDOR_CONFIG: start, heal, drain."""
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = measure(Path(config_file), Path(env_pack), work, workers, lifetime=lifetime)
    click.echo(table(out))
