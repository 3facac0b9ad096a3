"""Slurm: `sbatch condor/workers.sbatch` and `rhtc submit --scheduler slurm` start real workers.

The cluster is Debian bookworm's slurm-wlm with munge, single node, started privately by
tests/pools/slurm_pool.py. Its jobs run on this machine, which plays a node that shares
the submitter's filesystem: the workers use this Python (``--python``), and the analyst's
side runs in a child process with the same Python. (The pure part of condor/slurm.py:
tests/unit/condor/test_slurm.py.)
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.samples import DIMUON_FILES
from tests.pools.fixtures import (REPO, assert_no_secrets_in_jobs, job_logs,  # noqa: F401
                                  python_cmd, rhtc_env, wait_workers)

SBATCH = REPO / "condor" / "workers.sbatch"
ANALYST = REPO / "tests" / "pools" / "analyst.py"


def _analyst(config: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ANALYST), str(config), *args], capture_output=True,
                          text=True, env=rhtc_env(), timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _wait_registered(config, job_id: str, n: int, logs: Path) -> list[str]:
    expected = [f"slurm-{job_id}_{i}@" for i in range(n)]
    try:
        return wait_workers(config, lambda live: all(any(x.startswith(e) for x in live) for e in expected),
                            120, what=f"{n} slurm workers to register")
    except TimeoutError as err:
        raise AssertionError(f"{err}\n{job_logs(logs)}") from None


def _wait_gone(pool, config, job_id: str) -> None:
    wait_workers(config, lambda live: not any(x.startswith(f"slurm-{job_id}_") for x in live), 90,
                 what=f"workers of array job {job_id} to leave the broker")
    queue = lambda: subprocess.run(["squeue", "--noheader", "--array", f"--jobs={job_id}"],  # noqa: E731
                                   capture_output=True, text=True, env=pool.env()).stdout
    wait_until(lambda: not queue().strip(), 60, lambda: f"array job {job_id} to leave the queue:\n{queue()}",
               interval=1)


def test_slurm_unreachable_says_what_to_set(tmp_path, pool_broker):
    cfg = pool_broker.config.write(tmp_path / "broker.json")
    env = rhtc_env()
    env["SLURM_CONF"] = str(tmp_path / "no-such-slurm.conf")
    proc = subprocess.run([*python_cmd(), "submit", "--scheduler", "slurm", "--workers", "2",
                           "--config", str(cfg), "--log-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    assert "SLURM_CONF" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.pool
def test_sbatch_workers_script(slurm_pool, pool_broker, tmp_path):
    """`sbatch --array=0-2 condor/workers.sbatch`: the same executable as under HTCondor."""
    cfg = pool_broker.config.write(tmp_path / "broker.json")
    logs = tmp_path / "logs"
    logs.mkdir()
    env = slurm_pool.env(rhtc_env())
    proc = subprocess.run(["sbatch", "--parsable", "--array=0-2", f"--output={logs}/w-%A_%a.out",
                           f"--error={logs}/w-%A_%a.err", str(SBATCH), "--config", str(cfg),
                           "--python", sys.executable],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    try:
        names = _wait_registered(pool_broker.config, job_id, 3, logs)
        host = socket.gethostname()
        assert all(n.endswith("@" + host) for n in names if n.startswith("slurm-")), names
        results = _analyst(cfg, "where")["results"]
        assert [r[0] for r in results] == [x * x for x in range(24)]
        assert all(in_job for _, in_job, _ in results)
    finally:
        subprocess.run(["scancel", job_id], env=env, timeout=60)
    _wait_gone(slurm_pool, pool_broker.config, job_id)
    err = (logs / f"w-{job_id}_0.err").read_text()
    assert "exited with status 0" in err, err


@pytest.mark.pool
def test_rhtc_submit_slurm(slurm_pool, pool_broker, tmp_path):
    """`rhtc submit --scheduler slurm --workers 3`, the dimuon example through them, list, and
    the removal that the submission's summary prints.

    The analyst has the broker in their environment too ($RHTC_BROKER with its password,
    $RHTC_KEY): none of it reaches the jobs, which read the 0600 config file."""
    cfg = pool_broker.config.write(tmp_path / "broker.json")
    logs = tmp_path / "logs"
    env = slurm_pool.env(rhtc_env())
    env.update(pool_broker.config.env())
    env["RHTC_SESSION_NOTE"] = f"see {pool_broker.config.url}"     # a secret under another name
    proc = subprocess.run([*python_cmd(), "submit", "--scheduler", "slurm", "--workers", "3",
                           "--config", str(cfg), "--log-dir", str(logs)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    job_id = re.search(r"array job (\d+)", proc.stdout).group(1)
    remove = ["submit", "--rm", job_id, "--scheduler", "slurm"]      # run below as `python -m rhtc.condor ...`
    try:
        # the summary: where the logs go, which config the jobs read, and how to remove them
        assert proc.stdout.splitlines() == [
            f"submitted 3 workers to slurm: array job {job_id}",
            f"  logs:    {logs.resolve()}",
            f"  config:  {cfg.resolve()} (0600; its URL and key stay out of the job ad)",
            f"  watch:   rhtc status          remove: rhtc {' '.join(remove)}  (or scancel {job_id})"], proc.stdout
        _wait_registered(pool_broker.config, job_id, 3, logs)
        assert_no_secrets_in_jobs("SLURM_ARRAY_JOB_ID", job_id, pool_broker.config, logs)
        listed = subprocess.run([*python_cmd(), "ls", "--scheduler", "slurm"], capture_output=True,
                                text=True, env=env, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert len(re.findall(rf"^{job_id}_\d+\s+running", listed.stdout, re.M)) == 3, listed.stdout
        if all(f.exists() for f in DIMUON_FILES):          # the example needs the real samples
            got = _analyst(cfg, "dimuon", str(REPO), "5000", *map(str, DIMUON_FILES))
            assert got["files"] and got["events"] > 0 and got["pairs"] > 0 and got["in_z_window"] > 0
    finally:
        removed = subprocess.run([*python_cmd(), *remove], capture_output=True, text=True, env=env, timeout=60)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip() == f"removed 3 worker job(s) of {job_id}"
    _wait_gone(slurm_pool, pool_broker.config, job_id)
