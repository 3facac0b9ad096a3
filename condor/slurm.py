"""The Slurm side: ``sbatch`` an array of workers running the same ``rhtc_worker.sh``.

Slurm has no file transfer: the broker config (0600) and the worker environment (a
``rhtc pack`` tarball, or a Python with the project installed) must be on a filesystem the
nodes see, which is the normal case at analysis facilities (shared /home or /work).

sbatch hands the submitting environment to every job (``--export=ALL``), where anyone who
can read the job's environment (``scontrol``, ``/proc``, a prolog) sees it. So
:func:`submit` runs sbatch in :func:`job_environment`: without the broker variables
(``RHTC_BROKER``, ``RHTC_KEY``...) and without any variable that holds the broker's
password or signing key. The jobs read the 0600 config file instead.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from ..broker.wire.config import ENV_CONFIG, ENV_KEY, ENV_KEY_FILE, ENV_NAMESPACE, ENV_URL
from .schedd import SchedulerUnavailable

JOB_NAME = "rhtc-worker"
# The jobs get the broker from the config file named on their command line, never from these.
BROKER_ENV = (ENV_URL, ENV_KEY, ENV_KEY_FILE, ENV_NAMESPACE, ENV_CONFIG)


def job_environment(base: dict, secrets: Sequence[str]) -> dict:
    """``base`` without the broker variables and without any variable whose value holds
    one of ``secrets`` (the broker password, the signing key): what sbatch may export.

    >>> job_environment({"PATH": "/bin", "RHTC_KEY": "ab12", "DB": "redis://:pw@h"}, ["pw"])
    {'PATH': '/bin'}
    """
    return {k: v for k, v in base.items()
            if k not in BROKER_ENV and not any(s and s in v for s in secrets)}


def _require(cmd: str) -> str:
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():
        # sbatch would spend a minute looking for a configuration elsewhere before failing
        raise SchedulerUnavailable(
            f"SLURM_CONF={conf} does not exist: point SLURM_CONF at your cluster's slurm.conf "
            "(or unset it to use /etc/slurm/slurm.conf), then retry")
    path = shutil.which(cmd)
    if not path:
        raise SchedulerUnavailable(
            f"`{cmd}` is not on PATH: run this on a Slurm login node (or `module load slurm`); "
            "if Slurm is installed but not configured here, set SLURM_CONF to its slurm.conf")
    return path


def _slurm_error(cmd: str, proc: subprocess.CompletedProcess) -> SchedulerUnavailable:
    msg = (proc.stderr or proc.stdout).strip()
    hint = ""
    if re.search(r"contact|connect|slurm_load|Zero Bytes|Unable to", msg, re.IGNORECASE):
        conf = os.environ.get("SLURM_CONF")
        hint = (" Is slurmctld running and reachable from here? "
                + (f"SLURM_CONF={conf}." if conf else "SLURM_CONF is not set (the default "
                   "/etc/slurm/slurm.conf is used)."))
    return SchedulerUnavailable(f"`{cmd}` failed: {msg}.{hint}")


def memory_mb(size: str) -> int:
    """``"2GB"`` -> 2048 (Slurm wants megabytes).

    >>> memory_mb("2GB"), memory_mb("512MB"), memory_mb("1.5G"), memory_mb("3000")
    (2048, 512, 1536, 3000)
    """
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)i?B?\s*", str(size), re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot read {size!r} as a memory size; write e.g. 2GB or 2048MB")
    value, unit = float(m.group(1)), m.group(2).upper()
    factor = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    return max(1, int(round(value * factor)))


def submit(count: int, worker_args: Sequence[str], *, script: str | os.PathLike,
           executable: str | os.PathLike, log_dir: str | os.PathLike, memory: str = "2GB",
           cpus: int = 1, sbatch_args: Sequence[str] = (), env: dict | None = None,
           secrets: Sequence[str] = ()) -> str:
    """``sbatch --array=0-(count-1)`` the worker script; return the array job id.

    The jobs get ``env`` (default: this process's environment) through
    :func:`job_environment`, so no ``secrets`` and no broker variable reach them.
    """
    sbatch = _require("sbatch")
    log_dir = Path(log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)   # Slurm does not create it and loses the output
    cmd = [sbatch, "--parsable", f"--array=0-{count - 1}", f"--job-name={JOB_NAME}",
           f"--output={log_dir}/worker-%A_%a.out", f"--error={log_dir}/worker-%A_%a.err",
           f"--cpus-per-task={cpus}", f"--mem={memory_mb(memory)}M", *sbatch_args,
           str(script), *worker_args]
    run_env = job_environment(dict(os.environ if env is None else env), secrets)
    run_env["RHTC_WORKER_SH"] = str(Path(executable).resolve())
    proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=120)
    if proc.returncode != 0:
        raise _slurm_error("sbatch", proc)
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id:
        raise SchedulerUnavailable(f"sbatch printed no job id: {proc.stderr.strip()}")
    return job_id


def query(job_id: str | None = None) -> list[dict]:
    """The worker tasks in the queue (optionally of one array job)."""
    squeue = _require("squeue")
    cmd = [squeue, "--noheader", "--array", f"--name={JOB_NAME}", "--format=%i|%T|%N|%u|%M"]
    if job_id:
        cmd.append(f"--jobs={job_id}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        if job_id and "Invalid job id" in proc.stderr:
            return []
        raise _slurm_error("squeue", proc)
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 5:
            rows.append({"id": parts[0], "status": parts[1].lower(), "RemoteHost": parts[2] or None,
                         "Owner": parts[3], "time": parts[4]})
    return rows


def remove(job_id: str) -> int:
    """``scancel`` an array of workers (SIGTERM: each hands back its task and exits)."""
    scancel = _require("scancel")
    before = len(query(None if job_id == "all" else job_id))
    cmd = [scancel, f"--name={JOB_NAME}"]
    if job_id == "all":
        cmd.append(f"--user={os.environ.get('USER') or os.getuid()}")
    else:
        cmd.append(str(job_id))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise _slurm_error("scancel", proc)
    return before
