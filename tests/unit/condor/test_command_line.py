"""The batch command line, condor/__main__.py: ``python -m rhtc.condor`` (``rhtc submit`` and
``rhtc pack`` hand on to it) with its commands ``submit``, ``list`` (``ls``), ``rm`` and
``pack``, run in this process (click's runner) without a scheduler: what a dry run prints
and leaves behind, what a command says when the scheduler's tools are not there, the table
of worker jobs, and a pack refused before anything is built.

A real submission, list and removal: tests/scenarios/test_condor.py and test_slurm.py
(the pools); a real pack: the pack tests of tests/scenarios/test_condor.py.
"""
from __future__ import annotations

import sys
import time

import pytest
from click.testing import CliRunner

from rhtc.broker.wire.config import BrokerConfig
from rhtc.condor.__main__ import _print_jobs, main
from tests.kits.condor import EXECUTABLE
from tests.kits.credentials import make_token

PASSWORD = "s3cr3t-broker-pass"
KEY = bytes(range(32))


@pytest.fixture
def analyst(tmp_path, monkeypatch):
    """A shell in ``tmp_path`` with a broker config (0600) and a pack file, no broker
    variables, and nothing on ``PATH`` (no openssl, squeue, sbatch or scancel)."""
    for name in ("RHTC_BROKER", "RHTC_KEY", "RHTC_KEY_FILE", "RHTC_NAMESPACE", "RHTC_CONFIG", "SLURM_CONF",
                 "X509_USER_PROXY", "BEARER_TOKEN_FILE", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.chdir(tmp_path)
    BrokerConfig(f"redis://:{PASSWORD}@10.1.2.3:6379/0", KEY, "analysis").write(tmp_path / "broker.json")
    (tmp_path / "rhtc-env.tar.gz").write_bytes(b"a pack")
    return tmp_path


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_a_dry_run_prints_what_the_schedd_would_get_and_submits_nothing(analyst, monkeypatch):
    proxy = analyst / "x509up_u1000"
    proxy.write_text("a proxy (its certificate unreadable here: no openssl on PATH)")
    token = analyst / "bt_u1000"
    make_token(token, time.time() + 1800)
    monkeypatch.setenv("X509_USER_PROXY", str(proxy))
    monkeypatch.setenv("BEARER_TOKEN_FILE", str(token))
    got = _run("submit", "-n", "5", "--memory", "4GB", "--config", "broker.json", "--env", "rhtc-env.tar.gz",
               "--dry-run")
    assert got.exit_code == 0, got.output
    lines = got.stdout.splitlines()
    assert lines[0] == "# 5 workers would be submitted to condor with:"
    assert {"request_memory = 4GB", "request_cpus = 1", f"executable = {EXECUTABLE}",
            f"x509userproxy = {proxy}", "use_x509userproxy = true",
            f"transfer_input_files = {analyst / 'broker.json'}, {analyst / 'rhtc-env.tar.gz'}, {token}"} <= set(lines)
    arguments, = [line for line in lines if line.startswith("arguments = ")]
    assert arguments.split() == ["arguments", "=", "--config", "broker.json", "--env", "rhtc-env.tar.gz",
                                 "--token-file", "bt_u1000"]
    assert f"note: your bearer token {token} expires in 29 min" in got.stderr \
        or f"note: your bearer token {token} expires in 30 min" in got.stderr, got.stderr
    assert PASSWORD not in got.output and KEY.hex() not in got.output
    assert not (analyst / "rhtc-logs").exists(), "a dry run makes nothing, not even the log directory"


def test_env_cache_reaches_the_executable_before_the_workers_own_options(analyst):
    """rhtc_worker.sh reads its own options first and hands the rest to the worker: the
    shared directory of the unpacked environment comes right after --env (HTCondor and
    Slurm alike), and is not passed where the nodes' Python is given instead."""
    got = _run("submit", "-n", "2", "--config", "broker.json", "--env", "rhtc-env.tar.gz", "--no-credentials",
               "--env-cache", "/scratch/$USER/envs", "--disk-cache", "/scratch/$USER/c", "--dry-run")
    assert got.exit_code == 0, got.output
    arguments, = [line for line in got.stdout.splitlines() if line.startswith("arguments = ")]
    assert arguments.split()[2:8] == ["--config", "broker.json", "--env", "rhtc-env.tar.gz",
                                      "--env-cache", "/scratch/$USER/envs"], arguments
    assert "--disk-cache" in arguments.split()[8:]
    slurm = _run("submit", "-n", "2", "--scheduler", "slurm", "--config", "broker.json", "--no-credentials",
                 "--env", "rhtc-env.tar.gz", "--env-cache", "none", "--dry-run")
    assert slurm.exit_code == 0, slurm.output
    args = str(['--config', str(analyst / 'broker.json'), '--env', str(analyst / 'rhtc-env.tar.gz'),
                '--env-cache', 'none'])
    assert f"args = {args}" in slurm.stdout.splitlines(), slurm.stdout
    python = _run("submit", "-n", "2", "--scheduler", "slurm", "--config", "broker.json", "--no-credentials",
                  "--env-cache", "none", "--dry-run")
    assert python.exit_code == 0 and "--env-cache" not in python.stdout, python.stdout


def test_a_slurm_submission_warns_of_a_credential_in_tmp_and_of_one_expiring(analyst, monkeypatch):
    """Slurm's jobs read the analyst's credentials where they are: one in /tmp (a node's own)
    is named with where to put it, and one about to expire with what to do. Before, the
    Slurm branch returned before the credentials were looked at: neither was said."""
    token = analyst / "bt_u1000"                         # (tmp_path is under /tmp)
    make_token(token, time.time() + 1800)
    monkeypatch.setenv("BEARER_TOKEN_FILE", str(token))
    got = _run("submit", "--workers", "2", "--scheduler", "slurm", "--config", "broker.json", "--dry-run")
    assert got.exit_code == 0, got.output
    assert f"your bearer token is in {token}, which Slurm nodes do not see" in got.stderr, got.stderr
    assert "point BEARER_TOKEN_FILE at it" in got.stderr
    assert f"your bearer token {token} expires in" in got.stderr, got.stderr


def test_a_slurm_dry_run_prints_the_array_and_the_workers_command_line(analyst):
    got = _run("submit", "--workers", "4", "--scheduler", "slurm", "--config", "broker.json", "--cache-size", "1GB",
               "--dry-run")
    assert got.exit_code == 0, got.output
    lines = got.stdout.splitlines()
    assert lines[0] == "# 4 workers would be submitted to slurm with:"
    assert "array = 0-3" in lines
    # Slurm nodes share the filesystem: by default the workers run this Python
    assert f"args = {['--config', str(analyst / 'broker.json'), '--python', sys.executable, '--cache-size', '1GB']}" \
        in lines, lines
    assert PASSWORD not in got.output and not (analyst / "rhtc-logs").exists()


@pytest.mark.parametrize("args, tool", [
    (["list", "--scheduler", "slurm"], "squeue"),
    (["ls", "7", "--scheduler", "slurm"], "squeue"),
    (["rm", "7", "--scheduler", "slurm"], "scancel"),
    (["remove", "all", "--scheduler", "slurm"], "scancel"),
    (["submit", "--list", "--scheduler", "slurm"], "squeue"),
    (["submit", "--rm", "7", "--scheduler", "slurm"], "scancel"),
    (["submit", "--scheduler", "slurm", "--config", "broker.json"], "sbatch"),
])
def test_without_the_slurm_tools_a_command_says_where_to_run_it(analyst, args, tool):
    got = _run(*args)
    assert got.exit_code == 1 and isinstance(got.exception, SystemExit), got.exception   # no traceback
    assert got.stderr.startswith(f"Error: `{tool}` is not on PATH: run this on a Slurm login node"), got.stderr


def test_the_table_of_worker_jobs(monkeypatch, capsys):
    now = 1_700_000_000.0
    monkeypatch.setattr(time, "time", lambda: now)
    _print_jobs([
        {"id": "12.0", "status": "running", "RemoteHost": "slot1_2@node07.example.org", "Owner": "ana",
         "EnteredCurrentStatus": now - 3665},
        {"id": "12.1", "status": "held", "RemoteHost": None, "Owner": "ana", "HoldReason": "disk full",
         "EnteredCurrentStatus": now - 59},
        {"id": "4711_3", "status": "pending", "RemoteHost": None, "Owner": "ana", "time": "0:00"},  # Slurm's
    ], "condor")
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["JOB", "STATUS", "HOST", "OWNER", "SINCE"]
    assert out[1].split() == ["12.0", "running", "node07.example.org", "ana", "1:01:05"]
    assert out[2].split() == ["12.1", "held", "(disk", "full)", "-", "ana", "0:00:59"]
    assert out[3].split() == ["4711_3", "pending", "-", "ana", "0:00"]
    _print_jobs([], "slurm")
    assert capsys.readouterr().out == "no worker jobs in the slurm queue\n"


@pytest.mark.parametrize("args, says", [
    (["--python-version", "3"], "python_version must look like 3.11, not '3'"),
    (["--python-version", "3.13", "--glibc", "2.12"], "glibc 2.12: wheels exist for glibc 2.17 and newer only"),
])
def test_a_pack_for_nodes_it_cannot_serve_is_refused_before_anything_is_built(analyst, monkeypatch, args, says):
    monkeypatch.setenv("RHTC_CACHE", str(analyst / "cache"))
    got = _run("pack", "-o", "env.tar.gz", *args)
    assert got.exit_code == 1 and isinstance(got.exception, SystemExit), got.exception
    assert got.stderr == f"Error: {says}\n"
    assert not (analyst / "env.tar.gz").exists() and not (analyst / "cache").exists()
