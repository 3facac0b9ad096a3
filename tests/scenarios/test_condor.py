"""HTCondor: `condor_submit condor/workers.sub` and `rhtc submit` start real workers in a real pool.

The pool is Debian trixie's minicondor in a chroot (tests/pools/condor_pool.py); jobs run
as an ordinary user with the chroot's Python 3.13 and only the `rhtc pack` tarball, the
broker config and the executable transferred to them. The offline checks at the top need
no pool (they run the validation in a child interpreter, the executable with a stand-in
Python, and the submit code against the pool's broker); the description's defaults and
knobs, with no process, are in tests/unit/condor/test_submit.py.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.kits.condor import EXECUTABLE, WORKERS_SUB
from tests.helpers import wait_until
from tests.pools.common import wait_for
from tests.samples import DIMUON_FILES
from tests.pools.fixtures import (REPO, assert_no_secrets_in_jobs, broker_secrets, job_logs, make_owned_dir,  # noqa: F401
                                  python_cmd, rhtc_env, wait_workers, write_pool_config)


# --- offline: the validation, the executable, the submit code -----------------------
@pytest.mark.heavy
@pytest.mark.parametrize("text, message", [
    ("a = $(b)\nb = x$(a)\nexecutable = /bin/true\nqueue\n", "a -> b -> a"),
    ("executable = /bin/true\nqueue 2\nqueue 3\n", "2 queue statements"),
    ('executable = /bin/true\nrequirements = (OpSys == "LINUX") &&\nqueue\n', "requirements"),
    ('executable = /bin/true\n+JobFlavour = "workday\nqueue\n', "JobFlavour"),
    ("executable = /bin/true\nqueue name in (a, b)\n", "plain `queue N`"),
    ("executable = /bin/true\nworkers = zero\nqueue $(workers)\n", "not a number"),
])
def test_validation_catches_what_the_bindings_would_not(text, message):
    # run in a child with a timeout: a missed macro cycle makes htcondor2's expand() spin forever
    code = textwrap.dedent(f"""
        from rhtc.condor.validate import check_description, InvalidDescription
        try:
            check_description({text!r})
        except InvalidDescription as err:
            print("INVALID", err)
        else:
            print("VALID")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=rhtc_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("INVALID") and message in proc.stdout, proc.stdout


def test_submit_without_schedd_says_what_to_set(tmp_path, pool_broker):
    cfg = pool_broker.config.write(tmp_path / "broker.json")
    env = rhtc_env()
    env["CONDOR_CONFIG"] = "/dev/null"
    for var in ("COLLECTOR_HOST", "_CONDOR_COLLECTOR_HOST", "_CONDOR_SCHEDD_HOST"):
        env.pop(var, None)
    t0 = time.monotonic()
    proc = subprocess.run([*python_cmd(), "submit", "--workers", "2", "--config", str(cfg),
                           "--python", "python3", "--log-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    assert time.monotonic() - t0 < 30
    assert "CONDOR_CONFIG" in proc.stderr and "COLLECTOR_HOST" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_submit_refuses_a_config_others_can_read(tmp_path, pool_broker):
    from rhtc.condor.submit import submit_workers
    cfg = pool_broker.config.write(tmp_path / "broker.json")
    os.chmod(cfg, 0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        submit_workers(1, config_file=cfg, python="python3", dry_run=True)


def test_submit_reads_the_config_with_the_brokers_own_checks(tmp_path, pool_broker, monkeypatch):
    """condor/ reads the config file through broker/wire/config.py: a key too short to sign with
    is refused there, naming the file, and the environment does not override the file."""
    import json
    from rhtc.condor.submit import submit_workers
    short = tmp_path / "short.json"
    fd = os.open(short, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": pool_broker.config.url, "key": "ab" * 4}, fh)
    with pytest.raises(ValueError, match=r"short\.json is 4 bytes; use at least 16"):
        submit_workers(1, config_file=short, python="python3", dry_run=True)
    cfg = pool_broker.config.write(tmp_path / "broker.json")
    monkeypatch.setenv("RHTC_BROKER", "redis://elsewhere:1")
    jobs = submit_workers(1, config_file=cfg, python="python3", dry_run=True)
    assert jobs.config_file == cfg.resolve()


def _fake_python(tmp_path: Path) -> Path:
    """A stand-in for python3 that records how the worker would be started. The record is
    written aside and renamed into place: the test waits for it to exist, and ``echo > args``
    makes the file before it writes (a loaded machine read it empty once)."""
    fake = tmp_path / "fakepython"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in
          -c) exit 0 ;;
          -V) echo "Python 3.99"; exit 0 ;;
          -m) shift; echo "$@" > {tmp_path}/args.writing && mv {tmp_path}/args.writing {tmp_path}/args
              trap 'echo TERM >> {tmp_path}/args; exit 0' TERM
              while :; do sleep 0.1; done ;;
        esac
    """))
    fake.chmod(0o755)
    return fake


@pytest.mark.heavy
@pytest.mark.parametrize("env, name", [
    ({"RHTC_CONDOR_JOB": "12.3"}, "condor-12.3@"),
    ({"SLURM_ARRAY_JOB_ID": "45", "SLURM_ARRAY_TASK_ID": "2", "SLURM_JOB_ID": "46"}, "slurm-45_2@"),
    ({"_CONDOR_JOB_AD": "AD"}, "condor-77.5@"),
])
def test_executable_names_the_worker_and_passes_sigterm_on(tmp_path, env, name):
    fake = _fake_python(tmp_path)
    (tmp_path / "broker.json").write_text("{}")
    if env.get("_CONDOR_JOB_AD") == "AD":
        ad = tmp_path / ".job.ad"
        ad.write_text('ClusterId = 77\nProcId = 5\nOwner = "rhtc"\n')
        env = {"_CONDOR_JOB_AD": str(ad)}
    proc = subprocess.Popen([str(EXECUTABLE), "--python", str(fake), "--cache-size", "1GB"],
                            cwd=tmp_path, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)     # its group: the fake worker too, if the test fails
    try:
        wait_until((tmp_path / "args").exists, 20, "the executable to start the (fake) worker")
        args = (tmp_path / "args").read_text().split()
        assert args[:3] == ["rhtc.worker", "--config", "broker.json"]
        assert args[args.index("--name") + 1].startswith(name)
        assert args[args.index("--cache-size") + 1] == "1GB"
        assert oct((tmp_path / "broker.json").stat().st_mode & 0o777) == "0o600"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)     # a fake worker the killed executable left looping
    assert proc.returncode == 0, out
    assert "TERM" in (tmp_path / "args").read_text()


def _tiny_pack(path: Path, marker: str) -> Path:
    """A tarball laid out as ``rhtc pack`` writes one (manifest.json, src/, site/), small."""
    import io
    import json
    import tarfile
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (("manifest.json", json.dumps({"python": "3.99"})), ("src/marker.txt", marker),
                           ("site/README", "wheels")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


class _Job:
    """The executable started as a batch system starts it, with a stand-in python that records
    the PYTHONPATH it was given (``<dir>/pythonpath``) and serves until SIGTERM."""

    def __init__(self, tmp_path: Path, name: str, *args: str, env: dict | None = None):
        self.dir = tmp_path / name
        self.dir.mkdir()
        fake = self.dir / "fakepython"
        fake.write_text(textwrap.dedent(f"""\
            #!/bin/sh
            case "$1" in
              -c) exit 0 ;;
              -V) echo "Python 3.99"; exit 0 ;;
              -m) echo "$PYTHONPATH" > {self.dir}/pythonpath.writing && mv {self.dir}/pythonpath.writing {self.dir}/pythonpath
                  trap 'exit 0' TERM
                  while :; do sleep 0.1; done ;;
            esac
        """))
        fake.chmod(0o755)
        (self.dir / "broker.json").write_text("{}")
        self.proc = subprocess.Popen([str(EXECUTABLE), "--python", str(fake), *args], cwd=self.dir,
                                     env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **(env or {})},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        try:
            wait_until(lambda: (self.dir / "pythonpath").exists() or self.proc.poll() is not None, 20,
                       f"job {name} to start its (fake) worker")
        except BaseException:
            self.stop()
            raise
        assert self.proc.poll() is None, self.stop()

    @property
    def env_dir(self) -> Path:
        """The unpacked environment the worker was given (its src/ on PYTHONPATH)."""
        return Path((self.dir / "pythonpath").read_text().split(":")[0]).parent

    def stop(self) -> str:
        """SIGTERM, as condor_rm; the executable's log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=20)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)     # a fake worker a killed executable left
        return out


@pytest.mark.heavy
def test_a_nodes_workers_unpack_an_environment_once_and_remove_what_none_runs(tmp_path):
    """The first worker of a node unpacks the tarball into the node's shared directory, the
    next ones run it as it is; a newer pack is unpacked beside it, and once no job runs the
    older one, the next job that starts removes it (and what a job killed while unpacking
    left). Each unpack was ~130 MB written and 1-2 s of CPU, in every job."""
    cache = tmp_path / "envs"
    old, new = _tiny_pack(tmp_path / "old.tar.gz", "old"), _tiny_pack(tmp_path / "new.tar.gz", "new")
    jobs = []
    try:
        jobs.append(_Job(tmp_path, "first", "--env", str(old), "--env-cache", str(cache)))
        jobs.append(_Job(tmp_path, "second", "--env", str(old), "--env-cache", str(cache)))
        first, second = jobs
        assert first.env_dir == second.env_dir and first.env_dir.parent == cache
        assert (first.env_dir / "src" / "marker.txt").read_text() == "old"
        assert oct(cache.stat().st_mode & 0o777) == "0o700"
        killed = cache / "0123456789abcdef"             # a job killed while unpacking: no marker
        (killed / "src").mkdir(parents=True)
        jobs.append(_Job(tmp_path, "newer", "--env", str(new), "--env-cache", str(cache)))
        newer = jobs[-1]
        assert (newer.env_dir / "src" / "marker.txt").read_text() == "new"
        assert first.env_dir.is_dir(), "an environment that running workers use was removed"
        assert not killed.exists(), "a half-unpacked environment outlived the next job"
        logs = {job.dir.name: job.stop() for job in (first, second)}
        assert "unpacked" in logs["first"] and "this node's next workers use it" in logs["first"], logs["first"]
        assert "using the environment unpacked on this node by an earlier worker" in logs["second"], logs["second"]
        jobs.append(_Job(tmp_path, "last", "--env", str(new), "--env-cache", str(cache)))
        assert not first.env_dir.exists(), "an environment no job runs outlived the next job's start"
        assert sorted(p.name for p in cache.iterdir()) == [".lock", newer.env_dir.name]
    finally:
        for job in jobs:
            job.stop()


@pytest.mark.heavy
@pytest.mark.parametrize("setting", ["none", "a symlink"])
def test_an_environment_is_unpacked_into_the_jobs_scratch_when_not_shared(tmp_path, setting):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache = "none" if setting == "none" else str(tmp_path / "link")
    if setting == "a symlink":                          # another user's link to where they could write
        (tmp_path / "link").symlink_to(elsewhere)
    pack = _tiny_pack(tmp_path / "env.tar.gz", "mine")
    job = _Job(tmp_path, "job", "--env", str(pack), "--env-cache", cache, env={"_CONDOR_SCRATCH_DIR": str(scratch)})
    try:
        assert job.env_dir == scratch / "rhtc-env" and (job.env_dir / "src" / "marker.txt").read_text() == "mine"
        assert not any(elsewhere.iterdir())
    finally:
        log = job.stop()
    if setting == "a symlink":
        assert "is not a directory of" in log and "unpacked for this job alone" in log, log


@pytest.mark.heavy  # builds a worker pack
def test_pack_holds_the_worker_for_the_requested_python(tmp_path):
    from rhtc.condor.pack import pack_environment, read_manifest
    path = pack_environment(tmp_path / "env.tar.gz", python_version="3.13")
    manifest = read_manifest(path)
    assert manifest["python"] == "3.13"
    assert not any(r.startswith("matplotlib") for r in manifest["requirements"])
    import tarfile
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
    assert {"src/rhtc/worker/__main__.py", "src/rhtc/broker/wire/config.py", "src/rhtc/__init__.py", "manifest.json"} <= names
    assert any(n.startswith("site/numpy/") for n in names)
    assert any(n.startswith("site/uproot/") for n in names)
    assert not any("__pycache__" in n for n in names)
    time.sleep(1.1)         # a rebuilt pack would carry a later "created" stamp
    from rhtc.broker.wire.config import cache_dir
    killed = cache_dir() / "packs" / ".tmp-of-a-pack-killed-while-writing.tar.gz"
    killed.write_bytes(b"half a tarball")
    try:
        again = pack_environment(tmp_path / "again.tar.gz", python_version="3.13")
        assert not killed.exists(), "the half-written tarball of a killed pack outlived the next pack"
    finally:
        killed.unlink(missing_ok=True)
    assert read_manifest(again)["key"] == manifest["key"]
    assert read_manifest(again)["created"] == manifest["created"], "an unchanged pack must come from the cache"


def _site_versions(tarball: Path) -> dict[str, str]:
    """``{name: version}`` of the distributions installed in a pack's site/ (its dist-info dirs)."""
    import tarfile
    from rhtc.condor.lock import canonical
    found = {}
    with tarfile.open(tarball) as tar:
        for n in tar.getnames():
            m = re.fullmatch(r"site/([^/]+)-([^-/]+)\.dist-info", n)
            if m:
                found[canonical(m.group(1))] = m.group(2)
    return found


@pytest.mark.heavy  # builds a worker pack
def test_pack_pins_the_clients_exact_versions(tmp_path):
    """The nodes get the versions installed here (numpy, awkward, uproot, their dependencies),
    recorded in the manifest's lock and installed in site/, for the nodes' Python 3.13."""
    from importlib.metadata import version
    from rhtc.versions import stack_versions
    from rhtc.condor.pack import pack_environment, read_manifest
    path = pack_environment(tmp_path / "env.tar.gz", python_version="3.13")
    lock = read_manifest(path)["lock"]
    site = _site_versions(path)
    for name in ("numpy", "awkward", "awkward-cpp", "uproot", "cloudpickle", "lz4", "redis", "hiredis",
                 "fsspec", "packaging"):
        assert lock.get(name) == version(name), f"{name} not pinned to the client's {version(name)}: {lock}"
        assert site.get(name) == version(name), f"site/ has {name} {site.get(name)}, the client {version(name)}"
    assert set(stack_versions()) - {"hist", "python", "redis-htcondor", "coffea"} <= set(lock), "every stack package the worker needs is pinned"
    assert "matplotlib" not in site, "the plotting stack stays out unless asked for"


@pytest.mark.heavy  # builds a worker pack
def test_pack_extra_packages_are_pinned_when_installed_here(tmp_path):
    """`rhtc pack --extra dask --extra hepunits`: dask (installed here, with the test extra) and
    its dependencies travel at this environment's versions; hepunits (not installed here:
    nothing of the [all] extras needs it) is installed unpinned and listed as such."""
    from importlib.metadata import PackageNotFoundError, version
    from rhtc.condor.pack import pack_environment, read_manifest
    with pytest.raises(PackageNotFoundError):
        version("hepunits")         # the test needs a package that is not installed here
    path = pack_environment(tmp_path / "env.tar.gz", python_version="3.13", extra=["dask", "hepunits"])
    manifest = read_manifest(path)
    site = _site_versions(path)
    for name in ("dask", "toolz", "partd"):
        assert manifest["lock"].get(name) == site.get(name) == version(name), (name, manifest["lock"], site)
    assert "hepunits" in manifest["not_pinned"] and "hepunits" in site and "hepunits" not in manifest["lock"]


@pytest.mark.heavy  # builds a worker pack
def test_rhtc_pack_says_what_it_wrote_and_how_to_give_it_to_the_workers(tmp_path):
    """`rhtc pack -o env.tar.gz --with hepunits`: one line names the tarball, the nodes' Python,
    how many requirements and pinned packages it holds; the next names what pip chose the
    version of (hepunits: not installed here); the last, how to submit with it."""
    from click.testing import CliRunner
    from rhtc.condor.__main__ import main
    from rhtc.condor.pack import read_manifest
    out = tmp_path / "env.tar.gz"
    got = CliRunner().invoke(main, ["pack", "-o", str(out), "--python-version", "3.13", "--with", "hepunits"])
    assert got.exit_code == 0, got.output
    manifest = read_manifest(out)
    assert manifest["python"] == "3.13" and manifest["not_pinned"] == ["hepunits"]
    lines = got.stdout.splitlines()
    assert re.fullmatch(rf"{re.escape(str(out))}: {out.stat().st_size / 1e6:.0f} MB for Python 3\.13 "
                        rf"\({len(manifest['requirements'])} requirements, {len(manifest['lock'])} packages pinned "
                        r"to this environment's versions, \d+\.\d s\)", lines[0]), lines[0]
    assert lines[1:] == ["not pinned (pip chose the version for the nodes): hepunits",
                         f"transfer it with the workers: condor_submit condor/workers.sub env_pack={out}  "
                         f"(or rhtc submit --env {out})"]


@pytest.mark.slow
def test_pack_for_an_older_python_warns_naming_what_it_could_not_pin(tmp_path):
    """numpy 2.3+ has no wheel for Python 3.10: the pack drops that pin, installs what pip
    finds for 3.10, and says which packages differ from the client's versions."""
    from importlib.metadata import version
    from rhtc.condor.pack import PinWarning, pack_environment, read_manifest
    if int(version("numpy").split(".")[0]) < 2 or int(version("numpy").split(".")[1]) < 3:
        pytest.skip("this client's numpy still has Python 3.10 wheels")
    with pytest.warns(PinWarning, match=r"numpy==" + re.escape(version("numpy"))):
        path = pack_environment(tmp_path / "env.tar.gz", python_version="3.10")
    manifest = read_manifest(path)
    assert "numpy" in manifest["not_pinned"] and "numpy" not in manifest["lock"]
    site = _site_versions(path)
    assert site["numpy"] != version("numpy") and site["numpy"].startswith(("1.", "2.0", "2.1", "2.2"))
    pinned_here = [n for n, v in manifest["lock"].items() if n in site]
    assert pinned_here and all(site[n] == manifest["lock"][n] for n in pinned_here)


# --- a real pool ----------------------------------------------------------------------
pool_tests = pytest.mark.pool


def _run_map_through(analyst, config_path: Path) -> None:
    """A plain remote_map from the analyst's side (inside the pool, the workers' Python)."""
    results = analyst(config_path, "where")["results"]
    assert [r[0] for r in results] == [x * x for x in range(24)]
    assert all(in_job for _, in_job, _ in results), "every chunk must have run inside a condor job"
    assert {py for _, _, py in results} == {"3.13"}, "the chroot's Python runs the workers"


def _real_nanoaod() -> bool:
    return all(f.exists() for f in DIMUON_FILES)


def _expected_dimuon(step: int) -> dict:
    """The dimuon example run here, in this process, for comparison."""
    from rhtc.client import make_chunks
    from rhtc.examples import dimuon as example
    files = [str(f) for f in DIMUON_FILES]
    totals = {"events": 0, "pairs": 0}
    for chunk in make_chunks(files, step=step):
        out = example.dimuon(chunk)
        totals["events"] += out["events"]
        totals["pairs"] += out["pairs"]
    return totals


def _assert_no_secrets_in_job_ads(pool, cluster: int, config) -> None:
    ads = pool.run(["condor_q", "-allusers", "-l", str(cluster)], user=None).stdout
    assert f"ClusterId = {cluster}" in ads
    for secret in broker_secrets(config):
        assert secret not in ads, "the broker password or key leaked into the job ad"


def _wait_registered(pool, config, cluster: int, n: int, logs: Path) -> list[str]:
    expected = [f"condor-{cluster}.{i}@" for i in range(n)]
    try:
        return wait_workers(config, lambda live: all(any(x.startswith(e) for x in live) for e in expected),
                            240, what=f"{n} condor workers to register")
    except TimeoutError as err:
        raise AssertionError(f"{err}\njobs: {pool.jobs(f'ClusterId == {cluster}')}\n{job_logs(logs)}") from None


def _wait_gone(pool, config, cluster: int, names: list[str]) -> None:
    mine = [n for n in names if n.startswith(f"condor-{cluster}.")]
    wait_workers(config, lambda live: not set(mine) & set(live), 90,
                 what=f"workers of cluster {cluster} to leave the broker")
    wait_for(lambda: not pool.jobs(f"ClusterId == {cluster}"), 60,
             what=f"cluster {cluster} to leave the queue")


@pool_tests
def test_condor_submit_workers_sub(condor_pool, pool_broker, condor_env_pack, pool_analyst):
    """The users' words: `condor_submit condor/workers.sub`, inside the pool, as its user;
    then the dimuon example through the 3 workers, and condor_rm."""
    work = condor_pool.workdir("condor_submit")
    cfg = write_pool_config(pool_broker, work)
    condor_pool.run(["mkdir", "-p", "rhtc-logs"], cwd=work)
    assert condor_pool.inside(WORKERS_SUB).is_file(), "the repository is visible inside the pool"
    cluster = condor_pool.condor_submit(WORKERS_SUB, "broker_config=broker.json",
                                        f"env_pack={condor_env_pack}", cwd=work)
    names = []
    try:
        _assert_no_secrets_in_job_ads(condor_pool, cluster, pool_broker.config)
        names = _wait_registered(condor_pool, pool_broker.config, cluster, 3, work / "rhtc-logs")
        _run_map_through(pool_analyst, cfg)
        if _real_nanoaod():                  # the dimuon example needs the real samples
            got = pool_analyst(cfg, "dimuon", str(REPO), "5000", *map(str, DIMUON_FILES))
            assert got["files"], "the NanoAOD files are visible inside the pool"
            expected = _expected_dimuon(5000)
            assert (got["events"], got["pairs"]) == (expected["events"], expected["pairs"])
            assert got["in_z_window"] > 0
    finally:
        condor_pool.run(["condor_rm", str(cluster)], check=False)
    _wait_gone(condor_pool, pool_broker.config, cluster, names)
    err = (work / "rhtc-logs" / f"worker-{cluster}.0.err").read_text()
    assert "starting worker" in err and "exited with status 0" in err, err


@pool_tests
def test_rhtc_submit_condor(condor_pool, pool_broker, condor_env_pack, pool_analyst):
    """`rhtc submit --workers 3` through the htcondor2 bindings, then list and remove."""
    work = condor_pool.workdir("rhtc_submit")
    cfg = write_pool_config(pool_broker, work)
    logs = make_owned_dir(work / "logs")   # the jobs write there as the pool's user
    env = condor_pool.host_env(rhtc_env())
    env.update(pool_broker.config.env())      # in the analyst's shell too: must not reach the jobs
    proc = subprocess.run([*python_cmd(), "submit", "--workers", "3", "--config", str(cfg),
                           "--env", str(condor_env_pack), "--log-dir", str(logs), "--terse",
                           "-a", '+RhtcTest = "yes"'],
                          capture_output=True, text=True, env=env, cwd=work, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cluster = int(proc.stdout.strip().splitlines()[-1])
    names = []
    try:
        _assert_no_secrets_in_job_ads(condor_pool, cluster, pool_broker.config)
        assert condor_pool.jobs(f'ClusterId == {cluster} && RhtcTest == "yes"', ("ProcId",))
        names = _wait_registered(condor_pool, pool_broker.config, cluster, 3, logs)
        assert_no_secrets_in_jobs("RHTC_CONDOR_JOB", f"{cluster}.0", pool_broker.config, logs)
        _run_map_through(pool_analyst, cfg)
        listed = subprocess.run([*python_cmd(), "ls", str(cluster)], capture_output=True, text=True,
                                env=env, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert len(re.findall(rf"^{cluster}\.\d+\s+running", listed.stdout, re.M)) == 3, listed.stdout
    finally:
        removed = subprocess.run([*python_cmd(), "rm", str(cluster)], capture_output=True, text=True,
                                 env=env, timeout=60)
    assert removed.returncode == 0, removed.stderr
    assert "removed 3" in removed.stdout
    _wait_gone(condor_pool, pool_broker.config, cluster, names)


@pool_tests
def test_submit_workers_python_api(condor_pool, pool_broker, condor_env_pack, monkeypatch):
    """The Python function behind `rhtc submit`: returns the cluster, lists and removes it."""
    from rhtc.condor import submit_workers
    work = condor_pool.workdir("python_api")
    cfg = write_pool_config(pool_broker, work)
    logs = make_owned_dir(work / "logs")
    monkeypatch.setenv("CONDOR_CONFIG", str(condor_pool.host_condor_config))
    monkeypatch.chdir(work)
    jobs = submit_workers(1, config_file=cfg, env_pack=condor_env_pack, log_dir=logs)
    names = []
    try:
        assert jobs.scheduler == "condor" and jobs.count == 1 and int(jobs.job_id) > 0
        assert [r["id"] for r in jobs.list()] == [f"{jobs.job_id}.0"]
        names = _wait_registered(condor_pool, pool_broker.config, int(jobs.job_id), 1, logs)
    finally:
        removed = jobs.remove()
    assert removed == 1
    _wait_gone(condor_pool, pool_broker.config, int(jobs.job_id), names)


# --- the node's disk tier on the pool: a replaced worker comes back warm ----------------


def _submit_with_disk(pool, work, env_pack, disk, n: int) -> int:
    return pool.condor_submit(WORKERS_SUB, "broker_config=broker.json", f"env_pack={env_pack}",
                              f"workers={n}", f"disk_cache={disk}", "disk_cache_size=2GB",
                              "log_dir=rhtc-logs", cwd=work)


def _serve_one_map(pool, broker, env_pack, analyst, work, cfg, disk, files) -> tuple[int, list[dict]]:
    """Two worker jobs with the node's disk tier; one map; then every job removed. Every worker
    job removed, new ones submitted on the same execute node: the rerun reads nothing from
    the files."""
    cluster = _submit_with_disk(pool, work, env_pack, disk, 2)
    names = []
    try:
        names = _wait_registered(pool, broker.config, cluster, 2, work / "rhtc-logs")
        tasks = analyst(cfg, "reads", "2000", *files)["tasks"]
    finally:
        pool.run(["condor_rm", str(cluster)], check=False)
    _wait_gone(pool, broker.config, cluster, names)
    return cluster, tasks


@pool_tests
def test_a_replaced_condor_worker_is_warm_from_its_nodes_disk(condor_pool, pool_broker, condor_env_pack,
                                                              pool_analyst):
    if not _real_nanoaod():
        pytest.skip("needs the real NanoAOD samples (../shared/data/nanoaod)")
    work = condor_pool.workdir("disk_tier")
    cfg = write_pool_config(pool_broker, work)
    make_owned_dir(work / "rhtc-logs")
    disk = make_owned_dir(work / "node-disk")          # outside every job's scratch: outlives the jobs
    files = [str(f) for f in DIMUON_FILES]
    cold_cluster, cold = _serve_one_map(condor_pool, pool_broker, condor_env_pack, pool_analyst, work, cfg, disk, files)
    assert cold and all(t["bytes_file"] > 0 for t in cold)
    second, warm = _serve_one_map(condor_pool, pool_broker, condor_env_pack, pool_analyst, work, cfg, disk, files)
    assert second != cold_cluster                          # new jobs, new names: condor-<second>.N
    assert [t["value"] for t in warm] == [t["value"] for t in cold]
    assert all(t["worker"].startswith(f"condor-{second}.") for t in warm)
    assert sum(t["bytes_file"] for t in warm) == 0, warm
    for job in (0, 1):       # and they ran the environment the first jobs unpacked on the node
        log = (work / "rhtc-logs" / f"worker-{second}.{job}.err").read_text()
        assert "using the environment unpacked on this node by an earlier worker" in log, log
    assert all(t["bytes_disk"] > 0 for t in warm)
