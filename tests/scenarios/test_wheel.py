"""A real wheel: `python -m build` makes an sdist and a wheel that carry everything the
project needs at run time, and the wheel, installed into a new virtual environment outside
the checkout, runs a map on the local default from a directory that holds its own
``client.py`` and ``examples/`` (so nothing of ours shadows, or is shadowed by, the analyst's
files), exposes exactly one import name (``rhtc``) and answers ``rhtc --version``.

Slow (about two minutes with a warm pip cache, more from empty): it builds in an isolated
build environment and installs the wheel's dependencies from the package index.
"""
from __future__ import annotations

import configparser
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.samples import ROOT as REPO

pytestmark = pytest.mark.slow

# What the project reads from its own package at run time, beside the Python modules.
DATA_FILES = ["rhtc/broker/lua/take.lua", "rhtc/condor/workers.sub", "rhtc/condor/rhtc_worker.sh",
              "rhtc/condor/workers.sbatch", "rhtc/examples/dimuon.ipynb"]
# A map on the local default, from a directory that holds the analyst's own client.py and
# examples/: if either shadowed rhtc's modules (or rhtc shipped top-level packages with
# those names), the imports below would get the analyst's files and fail.
ANALYSIS = textwrap.dedent("""\
    import os, sys
    from rhtc import remote_map
    import client, examples
    assert client.MINE and examples.MINE, "the analyst's own modules must stay theirs"
    import rhtc, rhtc.client, pkgutil
    assert rhtc.client.__file__.startswith(sys.prefix), rhtc.client.__file__
    names = [m.name for m in pkgutil.walk_packages(rhtc.__path__, "rhtc.")]   # as doc generators do
    assert {"rhtc.broker.wire.keys", "rhtc.worker.disk", "rhtc.client.engine.options", "rhtc.errors"} <= set(names), names
    assert len(names) == len(set(names)) and not any(n.startswith("rhtc.rhtc") for n in names), names

    def square(x):
        return x * x, os.getpid()

    results = remote_map(square, list(range(20)))
    assert [r[0] for r in results] == [x * x for x in range(20)], results
    assert os.getpid() not in {pid for _, pid in results}, "the map must run in worker processes"
    print("MAP-OK", len(results))
""")


def _version() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg.get("metadata", "version")


def _run(cmd: list[str], *, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"`{' '.join(map(str, cmd))}` failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _clean_env(home: Path) -> dict:
    """This process's environment without anything that points at the checkout or a broker."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RHTC_", "PYTHON", "VIRTUAL_ENV", "CONDA"))}
    env.update(XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"),
               RHTC_CACHE=str(home / "cache" / "rhtc"))
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """``python -m build`` of the checkout: {"wheel": Path, "sdist": Path}."""
    out = tmp_path_factory.mktemp("dist")
    env = _clean_env(tmp_path_factory.mktemp("home"))
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], cwd=out, env=env)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


def test_wheel_and_sdist_carry_the_data_files_and_one_import_name(built):
    with zipfile.ZipFile(built["wheel"]) as whl:
        names = set(whl.namelist())
        top = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert len(top) == 1, top
        assert whl.read(top[0]).decode().split() == ["rhtc"], "the wheel must install one import name"
    missing = [f for f in DATA_FILES if f not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))} == {"rhtc"}
    with tarfile.open(built["sdist"]) as sdist:
        snames = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for f in ["broker/lua/take.lua", "condor/workers.sub", "condor/rhtc_worker.sh",
              "condor/workers.sbatch", "examples/dimuon.ipynb", "setup.cfg", "README.md"]:
        assert f in snames, f"the sdist lacks {f}"


def test_installed_wheel_runs_a_map_from_an_analysts_directory(built, tmp_path):
    home = tmp_path / "home"
    env = _clean_env(home)
    venv = tmp_path / "venv"                      # outside the checkout, no system site-packages
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env)
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(built["wheel"])],
         cwd=tmp_path, env=env, timeout=1800)

    version = _run([str(venv / "bin" / "rhtc"), "--version"], cwd=tmp_path, env=env).stdout.strip()
    assert version == f"rhtc {_version()}", version

    analyst = tmp_path / "analysis"
    (analyst / "examples").mkdir(parents=True)
    (analyst / "client.py").write_text("MINE = True\n")
    (analyst / "examples" / "__init__.py").write_text("MINE = True\n")
    (analyst / "run.py").write_text(ANALYSIS)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    proc = _run([str(py), "run.py"], cwd=analyst, env=env, timeout=600)
    assert "MAP-OK 20" in proc.stdout, proc.stdout + proc.stderr
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=analyst, env=env).stdout.strip())
    ours = {p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth"))
            and (p / "__init__.py").exists() and p.name in ("client", "broker", "worker", "condor",
                                                            "bench", "examples")}
    assert not ours, f"the install put generic top-level packages into site-packages: {ours}"
