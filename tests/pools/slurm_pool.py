"""A real single-node Slurm cluster for the tests: Debian bookworm's slurm-wlm and munge.

No systemd here, so everything is started by hand, privately, in a session directory that
holds every directory and file the daemons use (made fresh each session: nothing depends
on what the packages or an earlier run left in /var/lib/slurm, /etc/munge or /run/munge):

* ``munged -F`` with its own key, socket, pid and log files (``AuthInfo=socket=...`` in
  slurm.conf points Slurm at that socket, so a system munged is never touched);
* ``slurmctld -D`` and ``slurmd -D`` with ``SLURM_CONF`` pointing at a slurm.conf that has
  ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none`` (no cgroups needed), the node
  name equal to ``hostname -s``, free ports, 8 CPUs (``SlurmdParameters=config_overrides``:
  three workers fit on a 2-core machine) and no accounting.

The whole thing is up in a few seconds once the packages are installed (``slurmctld slurmd
slurm-client munge``, installed with apt-get when missing). Jobs run as root on this machine,
which plays the part of a node that shares the submitter's filesystem.
``stop()`` cancels the jobs, then ends slurmd (and the job steps it started), slurmctld and
munged, by pid.

By hand (from ``tests/``): ``python -m pools.slurm_pool`` keeps a cluster running until ^C.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import (DaemonDied, PoolUnavailable, alive, descendants, ensure_debian_packages, free_port,
                     pids_with_env, require_root, run, terminate, wait_for)

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
# Every directory the daemons use, made fresh in the session directory with these modes
# (nothing from the packages' own /var/lib/slurm, /var/spool/slurmd, /etc/munge or /run/munge,
# which a fresh machine may lack and an old one may hold state in): slurmctld's state
# (0700: job credentials), slurmd's spool, the logs, munged's key, socket, pid and seed.
SESSION_DIRS = {"state": 0o700, "spool": 0o755, "log": 0o755,
                # munged insists on a socket dir others can enter but not write
                "munge": 0o755}
COMMANDS = ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "sbatch"]

SLURM_CONF = """\
# written by tests/pools/slurm_pool.py for one test session
ClusterName=rhtctest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=15
MinJobAge=30
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 RealMemory=16000 State=UNKNOWN
PartitionName=rhtc Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmPool:
    """munged + slurmctld + slurmd on this machine, configured in a private directory.

    Example::

        with SlurmPool() as pool:
            subprocess.run(["sinfo"], env=pool.env())
    """

    def __init__(self, log=print):
        self.log = log
        self.dir: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.timings: dict[str, float] = {}

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    def env(self, base: dict | None = None) -> dict:
        """Environment for sbatch/squeue/scancel (and ``rhtc submit``) against this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def start(self, timeout: float = 60) -> "SlurmPool":
        require_root("the Slurm test cluster")
        t0 = time.monotonic()
        ensure_debian_packages(PACKAGES, COMMANDS)
        self.timings["install"] = time.monotonic() - t0
        t0 = time.monotonic()
        self.dir = Path(tempfile.mkdtemp(prefix="rhtc-slurm-"))
        os.chmod(self.dir, 0o755)
        try:
            for name, mode in SESSION_DIRS.items():
                (self.dir / name).mkdir()
                os.chmod(self.dir / name, mode)     # mkdir's mode is filtered by the umask
            self._start_munge()
            self._write_conf()
            self._spawn("slurmctld", ["/usr/sbin/slurmctld", "-D"])
            self._spawn("slurmd", ["/usr/sbin/slurmd", "-D"])
            wait_for(self._idle, timeout, what="the Slurm node to be idle")
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0
        return self

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> None:
        out = open(self.dir / "log" / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            env=env or self.env(), start_new_session=True)
        out.close()

    def _start_munge(self) -> None:
        m = self.dir / "munge"
        key = m / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(128))
        self.munge_socket = m / "munge.socket"
        self._spawn("munged", ["/usr/sbin/munged", "-F", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--log-file={m / 'munged.log'}",
                               f"--pid-file={m / 'munged.pid'}", f"--seed-file={m / 'munged.seed'}"],
                    env=dict(os.environ))
        wait_for(lambda: self.munge_socket.exists() or self._died("munged"), 20,
                 interval=0.1, what="munged's socket")

    def _write_conf(self) -> None:
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(SLURM_CONF.format(host=host, ctld_port=free_port(), slurmd_port=free_port(),
                                               munge_socket=self.munge_socket, dir=self.dir))
        self.host = host

    def _died(self, name: str) -> bool:
        p = self.procs.get(name)
        if p is not None and p.poll() is not None:
            out = (self.dir / "log" / f"{name}.out").read_text(errors="replace")[-2000:]
            raise DaemonDied(f"{name} exited with {p.returncode}: {out}")
        return False

    def _idle(self) -> bool:
        for name in ("slurmctld", "slurmd"):
            self._died(name)
        proc = run(["sinfo", "--noheader", "--format=%t"], check=False, env=self.env(), timeout=30)
        return proc.returncode == 0 and proc.stdout.strip() in ("idle", "mix", "alloc")

    def cancel_all(self, timeout: float = 30) -> None:
        """scancel every job of this cluster and wait for the queue to empty."""
        run(["scancel", "--full", "--partition=rhtc"], check=False, env=self.env(), timeout=30)
        try:
            wait_for(lambda: not run(["squeue", "--noheader"], check=False, env=self.env(),
                                     timeout=30).stdout.strip(), timeout, what="the Slurm queue to empty")
        except TimeoutError:
            pass

    def stop(self) -> None:
        """Cancel the jobs, then end slurmd (and its job steps), slurmctld and munged, by pid."""
        if self.procs.get("slurmctld") is not None and alive(self.procs["slurmctld"].pid):
            self.cancel_all()
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is None:
                continue
            stragglers = descendants(p.pid)     # slurmstepd and job processes
            terminate([p.pid], grace=10, popen=p)
            terminate(stragglers, grace=5)
        if self.dir is not None:
            # job steps are daemonized away from slurmd; they carry our SLURM_CONF
            terminate(pids_with_env("SLURM_CONF", str(self.conf)), grace=5)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> "SlurmPool":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    with SlurmPool() as pool:
        print(f"slurm up in {pool.timings}:  export SLURM_CONF={pool.conf}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
