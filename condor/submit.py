"""``rhtc submit``: start, list and remove workers on HTCondor (htcondor2) or Slurm (sbatch).

Both schedulers run the project's own files: HTCondor gets ``condor/workers.sub`` with its
knobs set as macros (exactly what ``condor_submit condor/workers.sub workers=N ...`` does),
Slurm gets ``condor/workers.sbatch`` as an array; both start ``condor/rhtc_worker.sh``.

Example::

    (not run by the tests: they need an HTCondor pool; tests/scenarios/test_condor.py runs them on the test pool)
    >>> from rhtc.condor import submit_workers, list_workers, remove_workers   # doctest: +SKIP
    >>> jobs = submit_workers(50, env_pack="rhtc-env.tar.gz")             # doctest: +SKIP
    >>> jobs.job_id, jobs.count                                           # doctest: +SKIP
    ('4711', 50)
    >>> jobs.remove()                                                     # doctest: +SKIP
    50
"""
from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import os
import re
import sys
import time
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from ..broker.wire.config import ENV_KEY, ENV_KEY_FILE, ENV_NAMESPACE, ENV_URL, BrokerConfig, \
    default_config_path, parse_duration
from . import schedd as _schedd
from . import slurm as _slurm
from rhtc.credentials import PROXY, WARN_BEFORE, find_credentials, until
from .pack import pack_environment, project_root
from .schedd import SchedulerUnavailable
from .validate import InvalidDescription, check_description

HERE = Path(__file__).resolve().parent
WORKERS_SUB = HERE / "workers.sub"
WORKERS_SBATCH = HERE / "workers.sbatch"
EXECUTABLE = HERE / "rhtc_worker.sh"
SCHEDULERS = ("condor", "slurm")


@dataclasses.dataclass
class WorkerJobs:
    """Workers submitted in one go: a condor cluster or a Slurm array."""

    scheduler: str
    job_id: str | None
    count: int
    log_dir: Path
    config_file: Path
    description: dict = dataclasses.field(default_factory=dict, repr=False)
    warnings: list = dataclasses.field(default_factory=list, repr=False)
    schedd: str | None = None
    pool: str | None = None

    def list(self) -> list[dict]:
        """This cluster's (array's) jobs still in the queue."""
        return list_workers(self.scheduler, self.job_id, schedd=self.schedd, pool=self.pool)

    def remove(self) -> int:
        """Remove the workers (they get SIGTERM, hand back their task and exit)."""
        return remove_workers(self.job_id, self.scheduler, schedd=self.schedd, pool=self.pool)


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if url.startswith("unix:") or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def broker_config_file(config_file: str | os.PathLike | None = None,
                       log_dir: str | os.PathLike = "rhtc-logs") -> tuple[Path, BrokerConfig]:
    """The 0600 file the workers will read, and the config it holds.

    An explicit ``config_file`` is used as it is. Without one, if ``$RHTC_BROKER`` & co
    are set, the resolved config is written to a new 0600 file in ``log_dir``; else the
    default config file (``$RHTC_CONFIG`` or ``~/.config/rhtc/broker.json``) is used.
    """
    env_set = any(os.environ.get(v) for v in (ENV_URL, ENV_KEY, ENV_KEY_FILE, ENV_NAMESPACE))
    if config_file is None and env_set:
        cfg = BrokerConfig.resolve()
        digest = hashlib.sha256(cfg.to_json().encode()).hexdigest()[:12]
        return Path(cfg.write(Path(log_dir).resolve() / f"broker-{digest}.json")), cfg
    path = Path(config_file).expanduser() if config_file else default_config_path()
    return path.resolve(), BrokerConfig.from_file(path)


def _secrets(cfg: BrokerConfig) -> list[str]:
    out = [cfg.key.hex()] if cfg.key else []
    password = urlsplit(cfg.url).password
    if password:
        out.append(password)
    return out


def build_condor_description(macros: dict, submit_file: Path = WORKERS_SUB,
                             append: Sequence[str] = ()) -> str:
    """The submit file's text with ``macros`` set in front (like ``condor_submit f name=value``)
    and the ``append`` lines placed just before its ``queue`` statement."""
    text = Path(submit_file).read_text()
    head = [f"{k} = {v}" for k, v in macros.items() if v is not None]
    lines = text.splitlines()
    extra = [a.strip() for a in append if a and a.strip()]
    for a in extra:
        if re.match(r"^\s*queue\b", a, re.IGNORECASE):
            raise InvalidDescription(f"--append {a!r}: set the number of workers with --workers, not a queue line")
    if extra:
        idx = next((i for i in range(len(lines) - 1, -1, -1)
                    if re.match(r"^\s*queue\b", lines[i], re.IGNORECASE)), len(lines))
        lines[idx:idx] = extra
    return "\n".join(head + lines) + "\n"


def submit_workers(workers: int = 3, *, scheduler: str = "condor",
                   config_file: str | os.PathLike | None = None,
                   env_pack: str | os.PathLike | None = None, python: str | None = None,
                   python_version: str | None = None, env_cache: str | None = None,
                   cache_size: str | None = None,
                   disk_cache: str | None = None, disk_cache_size: str | None = None,
                   lifetime: str | None = None, idle_timeout: str | None = None, credentials: bool = True,
                   log_dir: str | os.PathLike = "rhtc-logs", memory: str = "2GB", cpus: int = 1,
                   disk: str = "1GB", submit_file: str | os.PathLike | None = None,
                   append: Sequence[str] = (), sbatch_args: Sequence[str] = (),
                   schedd: str | None = None, pool: str | None = None,
                   dry_run: bool = False) -> WorkerJobs:
    """Submit ``workers`` worker jobs; return a :class:`WorkerJobs` with the cluster/array id.

    Args:
        scheduler: ``"condor"`` (htcondor2 bindings) or ``"slurm"`` (sbatch).
        config_file: the broker config the workers read (default: see :func:`broker_config_file`).
        env_pack: a ``rhtc pack`` tarball. HTCondor default: packed now for ``python_version``.
        python: instead of a pack, a Python on the nodes with the project installed
            (shared filesystem, CVMFS, container). Slurm default: this Python.
        env_cache: where a node's workers share the unpacked ``env_pack`` (the first job on a
            node unpacks it; default ``/tmp/rhtc-envs-<uid>``; ``"none"``: each job unpacks
            into its scratch).
        append: extra submit lines for HTCondor, e.g. ``['+JobFlavour = "workday"']``.
        sbatch_args: extra ``sbatch`` options for Slurm, e.g. ``["--partition=short"]``.
        schedd, pool: which schedd (name) in which pool (collector host), default the local one.
        disk_cache, disk_cache_size: the node's disk tier (a node-local directory that
            outlives the jobs, shared by the node's workers; ``$VARS`` are expanded on the
            node) and its cap; off by default.
        lifetime, idle_timeout: each worker drains and leaves this long after it starts
            (``"8h"``; default: the walltime in the job ad), or after this long without a
            task (``"20m"``; never under a pool keeper's minimum).
        dry_run: validate and return the expanded description without submitting.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, not {scheduler!r}")
    if workers < 1:
        raise ValueError("ask for at least one worker")
    log_dir = Path(log_dir).resolve()
    cfg_path, cfg = broker_config_file(config_file, log_dir)
    warnings = []
    if _is_loopback(cfg.url):
        warnings.append(f"the broker URL in {cfg_path} is a loopback address: workers on other "
                        "machines cannot reach it (start it with `rhtc broker --host 0.0.0.0 "
                        "--allow-remote` for a real pool)")
    if env_pack is not None and python is not None:
        raise ValueError("give either env_pack (a `rhtc pack` tarball) or python, not both")
    env = None
    if scheduler == "slurm" and env_pack is None and python is None:
        python = sys.executable   # Slurm sites share the filesystem: use this environment
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project_root()), env.get("PYTHONPATH")]))
    local = "%d.%d" % sys.version_info[:2]
    if python_version and python_version != local:
        warnings.append(f"the workers will run Python {python_version} and this client runs {local}: "
                        "functions you define here travel by value and their code only runs on the "
                        f"same Python X.Y; run the client with Python {python_version} too")
    if env_pack is None and python is None:
        env_pack = pack_environment(python_version=python_version)
        warnings.append(f"packed the worker environment for Python "
                        f"{python_version or '%d.%d' % sys.version_info[:2]} ({env_pack}); pass "
                        "--python-version to match the nodes' python3")
    pack = Path(env_pack).resolve() if env_pack is not None else None
    if pack is not None and not pack.is_file():
        raise FileNotFoundError(f"no worker environment at {pack}: make it with `rhtc pack -o {pack}`")

    found = find_credentials() if credentials else []
    warnings += credential_warnings(found, scheduler)      # (Slurm's jobs read them where they are)
    if scheduler == "slurm":
        worker_args = ["--config", str(cfg_path)]
        worker_args += ["--python", python] if python else ["--env", str(pack)]
        if env_cache and not python:
            worker_args += ["--env-cache", env_cache]
        if cache_size:
            worker_args += ["--cache-size", cache_size]
        if disk_cache:
            worker_args += ["--disk-cache", disk_cache, "--disk-cache-size", disk_cache_size or "20GB"]
        worker_args += _leave_args(lifetime, idle_timeout)
        description = {"script": str(WORKERS_SBATCH), "args": worker_args, "array": f"0-{workers - 1}"}
        for secret in _secrets(cfg):
            if any(secret in a for a in worker_args + list(sbatch_args)):
                raise InvalidDescription("the broker password or key would be on the sbatch command line")
        jobs = WorkerJobs("slurm", None, workers, log_dir, cfg_path, description, warnings)
        if not dry_run:
            jobs.job_id = _slurm.submit(workers, worker_args, script=WORKERS_SBATCH,
                                        executable=EXECUTABLE, log_dir=log_dir, memory=memory,
                                        cpus=cpus, sbatch_args=sbatch_args, env=env,
                                        secrets=_secrets(cfg))
        return jobs

    macros = {"workers": workers, "worker_sh": EXECUTABLE, "broker_config": cfg_path,
              "log_dir": log_dir, "memory": memory, "cpus": cpus, "disk": disk, "cache_size": cache_size,
              "env_cache": env_cache,
              "disk_cache": disk_cache, "disk_cache_size": disk_cache_size,
              "lifetime": _duration(lifetime, "lifetime"), "idle_timeout": _duration(idle_timeout, "idle_timeout")}
    for c in found:
        macros["x509_proxy" if c.kind == PROXY else "bearer_token"] = c.path
    if python:
        macros["worker_python"] = python
    else:
        macros["env_pack"] = pack
    text = build_condor_description(macros, Path(submit_file or WORKERS_SUB), append)
    checked = check_description(text, iwd=os.getcwd(), secrets=_secrets(cfg), check_files=True)
    jobs = WorkerJobs("condor", None, checked.count, log_dir, cfg_path, checked.expanded, warnings,
                      schedd, pool)
    if dry_run:
        return jobs
    log_dir.mkdir(parents=True, exist_ok=True)  # condor does not create it and loses the logs
    htcondor2 = _schedd.bindings()
    sub = htcondor2.Submit(text)
    jobs.job_id = str(_schedd.submit(sub, checked.count, schedd=schedd, pool=pool))
    return jobs


def credential_warnings(found: list, scheduler: str) -> list[str]:
    """What the analyst should know about the credentials the jobs get (expired, expiring,
    on a path Slurm nodes may not see)."""
    out = []
    for c in found:
        if c.expires and c.expires - time.time() < WARN_BEFORE:
            out.append(f"your {c.kind} {c.path} {until(c.expires)}: renew it, or root:// reads will be refused")
        if scheduler == "slurm" and c.path.startswith("/tmp/"):
            out.append(f"your {c.kind} is in {c.path}, which Slurm nodes do not see: put it on a shared path "
                       f"and point {'X509_USER_PROXY' if c.kind == PROXY else 'BEARER_TOKEN_FILE'} at it")
    return out


def _duration(value: str | None, name: str) -> str | None:
    """A duration knob, checked here (a typo fails at submission, not on every node)."""
    if value is None or value == "":
        return None
    try:
        parse_duration(value)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    return str(value).strip()


def _leave_args(lifetime: str | None, idle_timeout: str | None) -> list[str]:
    out = []
    if _duration(lifetime, "lifetime"):
        out += ["--lifetime", str(lifetime)]
    if _duration(idle_timeout, "idle_timeout"):
        out += ["--idle-timeout", str(idle_timeout)]
    return out


def list_workers(scheduler: str = "condor", job_id: str | int | None = None, *,
                 schedd: str | None = None, pool: str | None = None) -> list[dict]:
    """Worker jobs in the queue: dicts with ``id``, ``status``, ``RemoteHost``, ``Owner``."""
    if scheduler == "slurm":
        return _slurm.query(str(job_id) if job_id is not None else None)
    return _schedd.query(int(job_id) if job_id is not None else None, schedd=schedd, pool=pool)


def remove_workers(job_id: str | int, scheduler: str = "condor", *, schedd: str | None = None,
                   pool: str | None = None) -> int:
    """Remove workers: a cluster id (``"12"``), one job (``"12.3"``), an array id, or ``"all"``."""
    if scheduler == "slurm":
        return _slurm.remove(str(job_id))
    return _schedd.remove(job_id, schedd=schedd, pool=pool)


__all__ = ["WorkerJobs", "submit_workers", "list_workers", "remove_workers", "broker_config_file",
           "build_condor_description", "SchedulerUnavailable", "InvalidDescription",
           "WORKERS_SUB", "WORKERS_SBATCH", "EXECUTABLE"]
