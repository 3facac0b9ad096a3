"""pytest session fixtures for the real pools; import them into a test module to use them::

    from tests.pools.fixtures import condor_pool, pool_broker   # noqa: F401

A pool that cannot run here (not root, not Linux, debootstrap or the packages unavailable)
makes its tests skip with the reason, unless ``$RHTC_REQUIRE_POOLS`` (or ``$CI``) is true:
then it is a failure, so CI never passes by skipping. Bring-up times are printed.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from .common import PoolUnavailable, pids_with_env, wait_for
from .condor_pool import POOL_UID, CondorPool
from .slurm_pool import SlurmPool

REPO = Path(__file__).resolve().parents[2]


def pools_required() -> bool:
    value = os.environ.get("RHTC_REQUIRE_POOLS") or os.environ.get("CI") or ""
    return value.strip().lower() in ("1", "true", "yes")


def _say(request):
    """Print a line on the terminal even while pytest captures output (bring-up times)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")

    def say(msg: str) -> None:
        line = f"[pools] {msg}"
        if reporter is None:
            print(line)
        elif capman is not None:
            with capman.global_and_fixture_disabled():
                reporter.write_line(line)
        else:
            reporter.write_line(line)
    return say


def _unavailable(reason: str):
    if pools_required():
        pytest.fail(f"test pool required ($RHTC_REQUIRE_POOLS/$CI) but unavailable: {reason}",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def condor_pool(request):
    """A running HTCondor pool (minicondor in a trixie chroot); see pools/condor_pool.py."""
    say = _say(request)
    pool = CondorPool(log=say)
    t0 = time.monotonic()
    try:
        pool.start()
    except PoolUnavailable as err:
        _unavailable(str(err))
    t = pool.timings
    say(f"HTCondor pool up in {time.monotonic() - t0:.1f} s (chroot "
        + (f"built in {t['chroot_build']:.0f} s" if t.get("chroot_build") else "from cache")
        + f", daemons {t['start']:.1f} s)")
    yield pool
    t0 = time.monotonic()
    pool.stop()
    say(f"HTCondor pool stopped in {time.monotonic() - t0:.1f} s")


@pytest.fixture(scope="session")
def slurm_pool(request):
    """A running single-node Slurm cluster (munge + slurmctld + slurmd); see pools/slurm_pool.py."""
    say = _say(request)
    pool = SlurmPool(log=say)
    t0 = time.monotonic()
    try:
        pool.start()
    except PoolUnavailable as err:
        _unavailable(str(err))
    say(f"Slurm cluster up in {time.monotonic() - t0:.1f} s (packages {pool.timings['install']:.1f} s, "
        f"daemons {pool.timings['start']:.1f} s)")
    yield pool
    pool.stop()


@pytest.fixture(scope="session")
def pool_broker():
    """A broker on 127.0.0.1 (TCP), which jobs in the chroot and on this host both reach."""
    from rhtc.broker.embedded import EmbeddedBroker
    b = EmbeddedBroker(host="127.0.0.1").start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def condor_env_pack(condor_pool, request):
    """A ``rhtc pack`` tarball for the pool's Python, in the pool's shared directory."""
    version = condor_pool.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout.strip()
    from rhtc.condor.pack import pack_environment
    t0 = time.monotonic()
    path = pack_environment(condor_pool.shared / "rhtc-env.tar.gz", python_version=version)
    _say(request)(f"worker environment for Python {version} packed in {time.monotonic() - t0:.1f} s "
                  f"({path.stat().st_size / 1e6:.0f} MB)")
    return path


@pytest.fixture(scope="session")
def pool_analyst(condor_pool, condor_env_pack):
    """Run ``pools/analyst.py`` inside the pool with the workers' Python and environment.

    ``pool_analyst(config_path, "where")`` returns the script's JSON. The client must run the
    workers' Python X.Y: functions travel by value and their code only runs on that version.
    """
    import tarfile
    env_dir = condor_pool.shared / "analyst-env"
    env_dir.mkdir()
    with tarfile.open(condor_env_pack) as tar:
        tar.extractall(env_dir)
    script = Path(__file__).with_name("analyst.py")

    def run(config: Path, *args: str, timeout: float = 300) -> dict:
        proc = condor_pool.run(["python3", str(script), str(config), *args], user=None, check=False,
                               timeout=timeout, env={"PYTHONPATH": f"{env_dir}/src:{env_dir}/site"})
        if proc.returncode != 0:
            raise AssertionError(f"analyst.py {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return run


def write_pool_config(broker, directory: Path, owner: int | None = POOL_UID) -> Path:
    """The broker's 0600 config in ``directory``, owned by the user the jobs run as."""
    path = broker.config.write(directory / "broker.json")
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def make_owned_dir(path: Path, owner: int = POOL_UID) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, owner, owner)
    return path


def wait_workers(config, predicate, timeout: float, what: str) -> list[str]:
    """Poll live_workers until ``predicate(names)`` holds; return the names."""
    from rhtc.client import live_workers

    def check():
        names = sorted(w["name"] for w in live_workers(broker=config))
        return (names,) if predicate(names) else None      # a tuple: truthy even when empty
    return wait_for(check, timeout, interval=1.0, what=what)[0]


def job_logs(directory: Path, limit: int = 4000) -> str:
    """The tail of every log file in ``directory``, for failure messages."""
    out = []
    for f in sorted(Path(directory).rglob("*")):
        if f.is_file() and f.suffix in (".out", ".err", ".log"):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-limit:]}")
    return "\n".join(out) or f"(no logs in {directory})"


BROKER_VARIABLES = {"RHTC_KEY", "RHTC_BROKER", "RHTC_KEY_FILE"}


def broker_secrets(config) -> list[str]:
    """The broker's password and signing key (hex): what must never leave the 0600 file."""
    from urllib.parse import urlsplit
    password = urlsplit(config.url).password
    assert password, "the pool broker should have a password"
    return [config.key.hex(), password]


def assert_no_secrets_in_jobs(env_name: str, env_value: str, config, logs: Path) -> None:
    """Every running process of one batch job (found by ``env_name=env_value`` in its
    environment, e.g. ``SLURM_ARRAY_JOB_ID=12``): no broker variable, no secret in its
    environment or argv; and no secret in the job's output files in ``logs``."""
    secrets = broker_secrets(config)
    pids = pids_with_env(env_name, env_value)
    assert pids, f"no process with {env_name}={env_value} found"
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue       # it just exited
        leaked = {e.partition("=")[0] for e in environ} & BROKER_VARIABLES
        assert not leaked, f"job process {pid} ({argv!r}) got broker variables: {sorted(leaked)}"
        for secret in secrets:
            assert not any(secret in e for e in environ), f"job process {pid} has a secret in its environment"
            assert secret not in argv, f"job process {pid} has a secret on its command line"
    for f in Path(logs).rglob("*"):
        if f.is_file() and f.suffix in (".out", ".err", ".log"):
            text = f.read_text(errors="replace")
            assert not any(secret in text for secret in secrets), f"{f} holds a secret"


def python_cmd() -> list[str]:
    return [sys.executable, "-m", "rhtc.condor"]


def rhtc_env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


__all__ = ["condor_pool", "slurm_pool", "pool_broker", "condor_env_pack", "pool_analyst", "write_pool_config",
           "make_owned_dir", "wait_workers", "job_logs", "python_cmd", "rhtc_env", "pools_required",
           "broker_secrets", "assert_no_secrets_in_jobs"]
