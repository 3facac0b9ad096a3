"""The pool keeper's view of a batch system: one keeper's jobs, their states and why they
ended, and the verbs it needs (submit N more, remove these). HTCondor through the
``htcondor2`` bindings (the queue, and the history for jobs that left it; never
``condor_q`` text); Slurm through ``sbatch``, ``squeue --format`` and ``scontrol``.

A keeper's jobs carry its pool id: ``+RhtcPool = "<id>"`` on HTCondor, the comment
``rhtc-pool:<id>`` on Slurm. A job's worker is named after it (``condor-12.3@host``,
``slurm-45_2@host``: condor/rhtc_worker.sh), which is how the keeper tells which worker
runs in which job.

    >>> job_of_worker("condor-12.3@node7.site"), job_of_worker("slurm-45_2@n1"), job_of_worker("w1")
    ('12.3', '45_2', None)
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
import time
from pathlib import Path
from typing import Sequence

from . import schedd as _schedd
from . import slurm as _slurm
from .submit import submit_workers

#: the job attribute (HTCondor) and comment prefix (Slurm) that name a keeper's pool
POOL_ATTR = "RhtcPool"
SLURM_TAG = "rhtc-pool:"
_WORKER_JOB = re.compile(r"^(?:condor|slurm)-([0-9]+[._][0-9]+)@")
#: what the keeper reads of a job in the HTCondor queue
CONDOR_ATTRS = ["ClusterId", "ProcId", "JobStatus", "HoldReason", "HoldReasonCode", "EnteredCurrentStatus",
                "QDate", "NumJobStarts", "RemoteHost", "LastRemoteHost"]
#: Slurm's states, as the keeper names them
SLURM_STATES = {"pending": "idle", "running": "running", "completing": "running", "configuring": "idle",
                "suspended": "held", "requeued": "idle", "requeue_hold": "held", "requeue_fed": "idle"}
#: Slurm's reasons of a held job (``scontrol hold``, ``scontrol requeuehold``, an admin's hold)
SLURM_HELD = ("JobHeldUser", "JobHeldAdmin", "job requeued in held state")


def job_of_worker(name: str) -> str | None:
    """The batch job id a worker's name carries, or None (a worker started by hand)."""
    m = _WORKER_JOB.match(name or "")
    return m.group(1) if m else None


@dataclasses.dataclass
class Job:
    """One worker job as the keeper sees it."""

    id: str
    state: str                 # idle, running, held (in the queue); removed, completed (gone)
    reason: str = ""           # why it is held, or how it ended
    since: float = 0.0         # when it entered this state
    queued: float = 0.0        # when it was submitted
    starts: int = 0            # how many times it started (HTCondor reruns a vacated job)
    host: str = ""


class CondorBatch:
    """One keeper's worker jobs on an HTCondor pool."""

    name = "condor"

    def __init__(self, pool_id: str, submit_options: dict, schedd: str | None = None, pool: str | None = None):
        self.pool_id, self.options, self.schedd, self.pool = pool_id, dict(submit_options), schedd, pool
        self.log_dir = Path(self.options.get("log_dir", "rhtc-logs")).resolve()

    @property
    def _constraint(self) -> str:
        return f'{POOL_ATTR} =?= "{self.pool_id}"'

    def submit(self, count: int) -> list[str]:
        opts = dict(self.options)
        opts["append"] = [*opts.get("append", ()), f'+{POOL_ATTR} = "{self.pool_id}"']
        jobs = submit_workers(count, scheduler="condor", schedd=self.schedd, pool=self.pool, **opts)
        return [f"{jobs.job_id}.{i}" for i in range(count)]

    def jobs(self) -> dict[str, Job]:
        target = _schedd.find_schedd(self.schedd, self.pool)
        try:
            ads = target.query(constraint=self._constraint, projection=CONDOR_ATTRS)
        except Exception as err:
            raise _schedd.unavailable(err, self.schedd, self.pool) from None
        out = {}
        for ad in ads:
            jid = f"{ad['ClusterId']}.{ad['ProcId']}"
            state = _schedd.JOB_STATUS.get(ad.get("JobStatus"), str(ad.get("JobStatus")))
            out[jid] = Job(jid, state, str(ad.get("HoldReason") or ""), float(ad.get("EnteredCurrentStatus") or 0),
                           float(ad.get("QDate") or 0), int(ad.get("NumJobStarts") or 0),
                           str(ad.get("RemoteHost") or ad.get("LastRemoteHost") or "").split("@")[-1])
        return out

    def fate(self, job_id: str) -> tuple[str, str]:
        """How a job that left the queue ended: ("removed", why) or ("completed", "exit code N")."""
        cluster, proc = job_id.split(".")
        target = _schedd.find_schedd(self.schedd, self.pool)
        try:
            ads = list(target.history(f"ClusterId == {int(cluster)} && ProcId == {int(proc)}",
                                      ["JobStatus", "ExitCode", "ExitBySignal", "ExitSignal", "RemoveReason"], 1))
        except Exception:          # no history at this schedd: say what we know
            ads = []
        if not ads:
            return "gone", "left the queue"
        ad = ads[0]
        if ad.get("JobStatus") == 3:
            return "removed", str(ad.get("RemoveReason") or "removed")
        if ad.get("ExitBySignal"):
            return "completed", f"killed by signal {ad.get('ExitSignal')}"
        return "completed", f"exit code {ad.get('ExitCode')}"

    def remove(self, job_ids: Sequence[str], reason: str) -> None:
        if not job_ids:
            return
        htcondor2 = _schedd.bindings()
        target = _schedd.find_schedd(self.schedd, self.pool)
        try:
            target.act(htcondor2.JobAction.Remove, list(job_ids), reason=f"rhtc pool keeper: {reason}")
        except Exception as err:
            raise _schedd.unavailable(err, self.schedd, self.pool) from None

    def remove_all(self, reason: str) -> None:
        htcondor2 = _schedd.bindings()
        target = _schedd.find_schedd(self.schedd, self.pool)
        try:
            target.act(htcondor2.JobAction.Remove, self._constraint, reason=f"rhtc pool keeper: {reason}")
        except Exception as err:
            raise _schedd.unavailable(err, self.schedd, self.pool) from None

    def error_file(self, job_id: str) -> Path:
        return self.log_dir / f"worker-{job_id}.err"


class SlurmBatch:
    """One keeper's worker jobs on a Slurm cluster (arrays of ``condor/workers.sbatch``)."""

    name = "slurm"

    def __init__(self, pool_id: str, submit_options: dict, **_):
        self.pool_id, self.options = pool_id, dict(submit_options)
        self.log_dir = Path(self.options.get("log_dir", "rhtc-logs")).resolve()

    def submit(self, count: int) -> list[str]:
        opts = dict(self.options)
        opts["sbatch_args"] = [*opts.get("sbatch_args", ()), f"--comment={SLURM_TAG}{self.pool_id}"]
        opts.pop("append", None)
        jobs = submit_workers(count, scheduler="slurm", **opts)
        return [f"{jobs.job_id}_{i}" for i in range(count)]

    def jobs(self) -> dict[str, Job]:
        squeue = _slurm._require("squeue")
        proc = subprocess.run([squeue, "--noheader", "--array", f"--name={_slurm.JOB_NAME}",
                               "--format=%i|%T|%r|%V|%S|%N|%k"], capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise _slurm._slurm_error("squeue", proc)
        out = {}
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 7 or parts[6] != f"{SLURM_TAG}{self.pool_id}":
                continue
            jid, state, reason, queued, started, host, _ = parts
            state = state.lower()
            named = "held" if reason in SLURM_HELD or "held" in reason.lower() else SLURM_STATES.get(state, state)
            out[jid] = Job(jid, named, reason if named == "held" else "", _epoch(started) or _epoch(queued),
                           _epoch(queued), 0, host)
        return out

    def fate(self, job_id: str) -> tuple[str, str]:
        info = self.show(job_id)
        state = info.get("JobState", "").lower()
        if not state:
            return "gone", "left the queue"
        if state == "cancelled":
            return "removed", "cancelled (scancel)"
        code = info.get("ExitCode", "?").split(":")[0]
        return "completed", f"exit code {code}" if state == "completed" else f"{state}, exit code {code}"

    def show(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (empty once Slurm forgot the job)."""
        scontrol = _slurm._require("scontrol")
        proc = subprocess.run([scontrol, "--oneliner", "show", "job", job_id], capture_output=True, text=True,
                              timeout=60)
        if proc.returncode != 0:
            return {}
        return dict(p.split("=", 1) for p in proc.stdout.split() if "=" in p)

    def remove(self, job_ids: Sequence[str], reason: str) -> None:
        if job_ids:
            scancel = _slurm._require("scancel")
            subprocess.run([scancel, *job_ids], capture_output=True, text=True, timeout=60)

    def remove_all(self, reason: str) -> None:
        self.remove(list(self.jobs()), reason)

    def error_file(self, job_id: str) -> Path:
        array, _, task = job_id.partition("_")
        return self.log_dir / f"worker-{array}_{task}.err"


def _epoch(text: str) -> float:
    """Slurm's ``2026-11-24T08:00:00`` (local time) as seconds since the epoch; 0 if none."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0.0


def batch_for(scheduler: str, pool_id: str, submit_options: dict, schedd: str | None = None,
              pool: str | None = None):
    """The keeper's batch system: :class:`CondorBatch` or :class:`SlurmBatch`."""
    if scheduler == "slurm":
        return SlurmBatch(pool_id, submit_options)
    return CondorBatch(pool_id, submit_options, schedd, pool)


def startup_error(path: Path, limit: int = 400) -> str:
    """The reason a worker job failed at start-up, from its stderr: the executable's own
    ``rhtc_worker: ERROR:`` line where there is one, else the last line ('' if none)."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if "rhtc_worker: ERROR:" in line:
            return line.split("rhtc_worker: ERROR:", 1)[1].strip()[:limit]
    return lines[-1][:limit] if lines else ""
