"""A real single-machine HTCondor pool for the tests: Debian trixie's ``minicondor`` in a chroot.

Debian bookworm has no HTCondor, but trixie's ``minicondor`` (23.9) runs in a trixie
chroot made with debootstrap. What this module does, and why:

* **build** (once, cached): ``debootstrap --variant=minbase --include=minicondor,python3,
  python3-cffi-backend,procps trixie`` into ``/var/cache/rhtc-test/trixie`` (about a minute,
  ~440 MB; ``python3-cffi-backend`` must be named, debootstrap misses that virtual
  dependency), plus an ordinary user ``rhtc`` (uid 2000) that the jobs run as. A recipe
  stamp decides when the cache is stale; the build goes to a temporary directory first,
  so a half-built chroot is never used. ``$RHTC_POOL_CACHE`` moves the cache.
* **start** (every session, ~5 s): mount proc, sys and dev in the chroot; bind-mount the
  repository and the NanoAOD test files (read-only) and a shared work directory at the
  *same paths* inside it (a job's
  initial directory and executable must exist at the same path for the shadow); make every
  directory ``condor_config_val`` names (LOG, SPOOL, EXECUTE, LOCK, RUN: owner ``condor``,
  0755, emptied of the previous session's state; the token and password directories: root,
  0700), because only systemd-tmpfiles would make them and it never runs in a chroot; add a config with
  ``MOUNT_UNDER_SCRATCH =`` and ``USE_PID_NAMESPACES = False`` (without them jobs go on hold
  with errno 22 in this sandbox) and 8 CPUs; run ``condor_master -f``. Jobs then run as
  ``rhtc`` with the chroot's Python 3.13 and the host's network (127.0.0.1 reaches a broker
  started by the tests).
* **host access**: an IDTOKEN for ``rhtc`` from ``condor_token_create`` and a small host
  CONDOR_CONFIG (``COLLECTOR_HOST = 127.0.0.1:9618``, IDTOKENS only), so the host's PyPI
  ``htcondor2`` bindings submit to the chroot's schedd as ``rhtc``.
* **stop**: SIGTERM to condor_master (it removes the jobs), SIGKILL to any process still
  rooted in the chroot (by pid), unmount everything, delete the shared directory.

By hand (from ``tests/``): ``python -m pools.condor_pool up`` keeps a pool running until ^C.
"""
from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..samples import NANOAOD
from .common import (DaemonDied, PoolUnavailable, alive, bind, describe, ensure_debian_packages,
                     mounts_under, pids_rooted_in, require_root, run, safe_rmtree, terminate,
                     unmount_all, wait_for)

SUITE = "trixie"
INCLUDE = ("minicondor", "python3", "python3-cffi-backend", "procps")
POOL_USER = "rhtc"
POOL_UID = 2000
RECIPE = {"version": 1, "suite": SUITE, "variant": "minbase", "include": list(INCLUDE),
          "user": POOL_USER, "uid": POOL_UID}
# The directories the daemons write (owned by the ``condor`` user, made fresh every
# session) and the ones that hold the pool's signing key and tokens (root, 0700, kept).
STATE_DIRS = ("LOG", "SPOOL", "EXECUTE", "LOCK", "RUN")
SECRET_DIRS = ("SEC_PASSWORD_DIRECTORY", "SEC_TOKEN_SYSTEM_DIRECTORY")
CONDOR_OWNER = "condor"
REPO = Path(__file__).resolve().parents[2]
# The real NanoAOD files, for the dimuon example in the pool: the tests' one sample directory.
DATA = NANOAOD

POOL_CONFIG = """\
# written by tests/pools/condor_pool.py for the test session
# Without these two, jobs go on hold (errno 22) in this sandbox.
MOUNT_UNDER_SCRATCH =
USE_PID_NAMESPACES = False
# Three workers and more on a 2-core machine: the workers mostly wait on the broker.
NUM_CPUS = 8
# Copy a job's x509 proxy instead of delegating it: delegation signs a new proxy with the
# user's, which needs a real proxy chain; the tests' proxy is a self-signed certificate.
DELEGATE_JOB_GSI_CREDENTIALS = False
# Keep the pool quick to react.
SCHEDD_INTERVAL = 2
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_CYCLE_DELAY = 2
STARTD_UPDATE_INTERVAL = 5
"""


def cache_root() -> Path:
    return Path(os.environ.get("RHTC_POOL_CACHE", "/var/cache/rhtc-test"))


def _clean_env() -> dict:
    """The environment the chroot's daemons and commands see: nothing from the host's condor."""
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb"}


def build_chroot(dest: Path, *, log=print) -> float:
    """Make the trixie chroot at ``dest`` unless a good one is there; return seconds spent."""
    stamp = dest / ".rhtc-recipe.json"
    if stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == RECIPE:
                return 0.0
        except ValueError:
            pass
        log(f"condor pool: {dest} was built from another recipe; rebuilding")
    ensure_debian_packages(["debootstrap"], ["debootstrap"])
    t0 = time.monotonic()
    dest.parent.mkdir(parents=True, exist_ok=True)
    building = dest.with_name(dest.name + ".building")
    safe_rmtree(building)
    mirror = os.environ.get("RHTC_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    log(f"condor pool: debootstrap {SUITE} into {building} (about a minute) ...")
    try:
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(INCLUDE), SUITE,
             str(building), mirror], timeout=1200)
        run(["chroot", str(building), "useradd", "--create-home", "--uid", str(POOL_UID),
             "--user-group", "--shell", "/bin/sh", POOL_USER], env=_clean_env())
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        unmount_all(building)
        raise PoolUnavailable(f"debootstrap of Debian {SUITE} failed: {describe(err)}") from err
    unmount_all(building)
    (building / ".rhtc-recipe.json").write_text(json.dumps(RECIPE))
    safe_rmtree(dest)
    os.rename(building, dest)
    return time.monotonic() - t0


class CondorPool:
    """One HTCondor pool (collector, negotiator, schedd, startd) in a trixie chroot.

    Example::

        pool = CondorPool().start()
        work = pool.workdir("demo")                      # same path on host and in the pool
        pool.condor_submit(REPO / "condor/workers.sub", cwd=work)
        pool.stop()
    """

    def __init__(self, cache: Path | None = None, log=print):
        self.cache = cache or cache_root()
        self.root = self.cache / SUITE
        self.log = log
        self.master: subprocess.Popen | None = None
        self.session: Path | None = None      # host-only files (token, host config, logs)
        self.shared: Path | None = None       # bind-mounted at the same path in the chroot
        self.timings: dict[str, float] = {}
        self.uid_domain = ""
        self._lock = None

    # --- paths ---------------------------------------------------------------------
    def inside(self, path: str | os.PathLike) -> Path:
        """Where a chroot path is on the host."""
        return self.root / str(path).lstrip("/")

    @property
    def host_condor_config(self) -> Path:
        return self.session / "host" / "condor_config"

    def host_env(self, base: dict | None = None) -> dict:
        """Environment for host processes that use the htcondor2 bindings against this pool."""
        env = dict(os.environ if base is None else base)
        env["CONDOR_CONFIG"] = str(self.host_condor_config)
        return env

    def workdir(self, name: str) -> Path:
        """A fresh directory owned by the pool's user, visible at the same path in the chroot."""
        path = self.shared / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        os.chown(path, POOL_UID, POOL_UID)
        return path

    # --- running things inside ------------------------------------------------------
    def run(self, cmd: str | list[str], *, user: str | None = POOL_USER, cwd: str | None = None,
            check: bool = True, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run a shell command inside the chroot, as the pool's user unless ``user=None`` (root)."""
        script = cmd if isinstance(cmd, str) else shlex.join(cmd)
        if cwd:
            script = f"cd {shlex.quote(str(cwd))} && {script}"
        if env:
            script = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + script
        argv = ["chroot", str(self.root)]
        argv += ["runuser", "-u", user, "--", "sh", "-c", script] if user else ["sh", "-c", script]
        return run(argv, check=check, timeout=timeout, env=_clean_env())

    def condor_submit(self, submit_file: str | os.PathLike, *args: str, cwd: str | os.PathLike) -> int:
        """``condor_submit`` inside the pool as its user; returns the cluster id."""
        out = self.run(["condor_submit", "-terse", str(submit_file), *args], cwd=str(cwd)).stdout
        first = out.strip().splitlines()[-1].split(" - ")[0]
        return int(first.split(".")[0])

    def jobs(self, constraint: str = "true", attrs=("ClusterId", "ProcId", "JobStatus", "HoldReason")):
        out = self.run(["condor_q", "-allusers", "-constraint", constraint, "-json",
                        "-attributes", ",".join(attrs)], user=None).stdout.strip()
        return json.loads(out) if out else []

    # --- lifecycle ------------------------------------------------------------------
    def start(self, timeout: float = 90) -> "CondorPool":
        require_root("the HTCondor test pool")
        try:
            self.timings["chroot_build"] = build_chroot(self.root, log=self.log)
        except subprocess.CalledProcessError as err:
            raise PoolUnavailable(describe(err)) from err
        t0 = time.monotonic()
        self._take_lock()
        self._clean_leftovers()
        self.session = Path(tempfile.mkdtemp(prefix="rhtc-condor-session-"))
        self.shared = Path(tempfile.mkdtemp(prefix="rhtc-condor-shared-"))
        os.chmod(self.shared, 0o755)
        try:
            self._mount()
            self._configure()
            self._start_master()
            wait_for(self._ready, timeout, what="the HTCondor pool's schedd and startd")
            self._make_token()
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0
        return self

    def _take_lock(self, timeout: float = 900) -> None:
        """One pool per chroot at a time: a second test session waits for the first."""
        self._lock = open(self.cache / f"{SUITE}.lock", "w")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PoolUnavailable(f"another session keeps the pool in {self.root} busy")
                time.sleep(2)

    def _clean_leftovers(self) -> None:
        """A session that died left daemons or mounts behind: end them (by pid) first."""
        stray = pids_rooted_in(self.root)
        if stray:
            self.log(f"condor pool: ending {len(stray)} processes left in {self.root}")
            terminate(stray, grace=5)
        unmount_all(self.root)

    def _mount(self) -> None:
        r = self.root
        run(["mount", "-t", "proc", "proc", str(r / "proc")])
        bind("/sys", r / "sys", recursive=True)
        bind("/dev", r / "dev", recursive=True)
        bind(REPO, self.inside(REPO), readonly=True)
        if DATA.is_dir():
            bind(DATA, self.inside(DATA), readonly=True)
        bind(self.shared, self.inside(self.shared))

    def _configure(self) -> None:
        (self.inside("/etc/condor/config.d") / "99-rhtc-test.conf").write_text(POOL_CONFIG)
        self._make_state_dirs()
        self.uid_domain = self.run(["condor_config_val", "UID_DOMAIN"], user=None).stdout.strip()

    def _make_state_dirs(self) -> None:
        """Create, empty, every directory the pool's configuration names, as HTCondor expects.

        debootstrap runs the ``condor`` package's postinst, which makes only the LOG
        directory; the others come from systemd-tmpfiles at boot, which never runs in a
        chroot. So each session asks ``condor_config_val`` where they are and makes them
        from nothing (the previous session's jobs, logs and sockets go with them). It runs
        inside the chroot, so paths through symlinks such as ``/var/run -> /run`` resolve
        there and never on the host.
        """
        state = self.run(["condor_config_val", *STATE_DIRS], user=None).stdout.split()
        secret = self.run(["condor_config_val", *SECRET_DIRS], user=None).stdout.split()
        if len(state) != len(STATE_DIRS) or len(secret) != len(SECRET_DIRS):
            raise PoolUnavailable(f"condor_config_val in {self.root} did not name all of "
                                  f"{STATE_DIRS + SECRET_DIRS}: got {state + secret}")
        script = ('set -e; for d in "$@"; do case "$d" in /?*) ;; *) echo "bad dir $d" >&2; exit 2;; '
                  'esac; done; ')
        script += "".join(f'rm -rf -- "${i}"; install -d -o {CONDOR_OWNER} -g {CONDOR_OWNER} '
                          f'-m 0755 -- "${i}"; ' for i in range(1, len(state) + 1))
        script += "".join(f'install -d -o root -g root -m 0700 -- "${i}"; '
                          for i in range(len(state) + 1, len(state) + len(secret) + 1))
        self.run(["sh", "-c", script, "dirs", *state, *secret], user=None)
        self.log(f"condor pool: made {' '.join(state)} ({CONDOR_OWNER}, 0755) and "
                 f"{' '.join(secret)} (root, 0700)")

    def _start_master(self) -> None:
        out = open(self.session / "condor_master.out", "wb")
        self.master = subprocess.Popen(["chroot", str(self.root), "/usr/sbin/condor_master", "-f"],
                                       stdout=out, stderr=subprocess.STDOUT, env=_clean_env(),
                                       start_new_session=True)
        out.close()

    def _ready(self) -> bool:
        if self.master.poll() is not None:
            log = (self.session / "condor_master.out").read_text()[-2000:]
            raise DaemonDied(f"condor_master exited with {self.master.returncode}: {log}")
        schedds = self.run(["condor_status", "-schedd", "-af", "Name"], user=None, check=False).stdout
        slots = self.run(["condor_status", "-af", "Name"], user=None, check=False).stdout
        return bool(schedds.strip() and slots.strip())

    def _make_token(self) -> None:
        token = self.run(["condor_token_create", "-identity", f"{POOL_USER}@{self.uid_domain}"],
                         user=None).stdout.strip()
        tokens = self.session / "host" / "tokens.d"
        tokens.mkdir(parents=True)
        os.chmod(tokens, 0o700)
        fd = os.open(tokens / POOL_USER, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        self.host_condor_config.write_text(
            "# host side of the rhtc test pool: talk to the chroot's collector with an IDTOKEN\n"
            "COLLECTOR_HOST = 127.0.0.1:9618\n"
            "SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS\n"
            f"SEC_TOKEN_DIRECTORY = {tokens}\n"
        )

    def stop(self) -> None:
        """End the daemons and their jobs (by pid), unmount, delete the session's files."""
        if self.master is not None and alive(self.master.pid):
            # SIGTERM = graceful shutdown: the schedd stops its jobs first
            terminate([self.master.pid], grace=30, popen=self.master)
        self.master = None
        stray = pids_rooted_in(self.root)
        if stray:
            terminate(stray, grace=5)
        unmount_all(self.root)
        # the environments the jobs unpacked for the node's next workers (rhtc_worker.sh
        # --env-cache, /tmp/rhtc-envs-<uid>): a real node's /tmp cleanup ends them; in the
        # chroot, which outlives the pool, nothing would
        for envs in (self.root / "tmp").glob("rhtc-envs-*"):
            if not mounts_under(envs):
                shutil.rmtree(envs, ignore_errors=True)
        for path in (self.shared, self.session):
            if path is not None and not mounts_under(path):
                shutil.rmtree(path, ignore_errors=True)
        if self.shared is not None:
            # the empty mount point left inside the chroot
            try:
                self.inside(self.shared).rmdir()
            except OSError:
                pass
        self.shared = self.session = None
        if self._lock is not None:
            self._lock.close()      # releases the flock
            self._lock = None

    def __enter__(self) -> "CondorPool":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "up"
    if cmd == "build":
        t = build_chroot(cache_root() / SUITE)
        print(f"chroot ready ({t:.0f} s)")
        return 0
    if cmd == "up":
        with CondorPool() as pool:
            print(f"pool up in {pool.timings}; shared dir {pool.shared}")
            print(f"  export CONDOR_CONFIG={pool.host_condor_config}")
            print(f"  chroot {pool.root} runuser -u {POOL_USER} -- condor_q")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
        return 0
    print("usage: python -m pools.condor_pool [build|up]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
