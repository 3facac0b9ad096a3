"""Pack what a worker needs into one tarball that a batch job unpacks (once per node).

Execute nodes share nothing with the analyst's machine: they have neither this project
nor numpy, uproot, awkward... and often another Python than the notebook's. ``rhtc pack``
builds, on the analyst's machine, a ``.tar.gz`` holding

* ``site/``: the worker's dependencies, installed by ``pip install --target`` from
  binary wheels *for the node's Python version and platform* (``--python-version 3.13
  --platform manylinux_2_28_x86_64 ...``), so no compiler and no index are needed on the
  node;
* ``src/rhtc/``: this project's own package (``rhtc.broker``, ``rhtc.worker``, ...);
* ``manifest.json``: the Python version it was built for, the requirements, the lock
  (``{"numpy": "2.4.6", ...}``: the exact versions installed in ``site/``), a content hash.

The versions are the client's: :mod:`rhtc.condor.lock` pins every requirement and
dependency to what is installed in the environment that runs ``rhtc pack``, so a result
pickled on a node unpickles in the notebook. The XRootD client (:data:`INSTALLED_EXTRAS`)
travels whenever it is installed here, since a ``root://`` chunk needs it on the node too;
anything else, coffea included, travels when asked for (``--with coffea``,
``extra=["coffea"]``), pinned when installed here. If
the nodes run another Python X.Y and a pinned version has no wheel for it, that pin is
dropped, pip picks a version, and a :class:`PinWarning` names each such package.

``condor/rhtc_worker.sh --env rhtc-env.tar.gz`` unpacks it and runs
``python3 -m rhtc.worker`` with ``PYTHONPATH=src:site``, after checking that the node's
``python3`` is the version the pack was built for. The pack is cached by content hash
(``~/.cache/rhtc/packs``): packing again with the same sources and requirements is
instant, and a change to the project's sources alone reuses the installed dependencies.

Example::

    (not run by the tests: packing downloads wheels; tests/scenarios/test_condor.py packs for the test pool)
    >>> from rhtc.condor.pack import pack_environment                  # doctest: +SKIP
    >>> pack_environment("rhtc-env.tar.gz", python_version="3.11")  # doctest: +SKIP
    PosixPath('rhtc-env.tar.gz')

The alternatives, for large pools: install the project once on a shared filesystem
(CVMFS, /home, /cvmfs/...) or in a container image and start the workers with
``worker_python=/path/to/python`` instead of a pack (see docs/htcondor.md).
"""
from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Iterable, Sequence

from ..broker.wire.config import cache_dir
from .lock import Lock, canonical, lock_environment
from rhtc.errors import RhtcError

PACK_FORMAT = 2          # 2: pinned to the client's versions (manifest "lock")
DIST_NAME = "redis-htcondor"
# examples/ travels too: a function from rhtc.examples is pickled by reference, so the
# nodes must import it (its notebooks and pictures stay behind: NODE_SKIP_SUFFIXES).
PROJECT_PACKAGES = ("broker", "worker", "client", "condor", "bench", "examples")
NODE_SKIP_SUFFIXES = (".pyc", ".pyo", ".png", ".ipynb")
# The worker never draws: leave the client's plotting stack out unless asked for.
DEFAULT_EXCLUDE = ("matplotlib",)
DEFAULT_GLIBC = "2.28"   # EL8 and newer; use --glibc 2.17 for EL7-era nodes
#: The [xrootd] extra's packages, packed whenever the client has them: a root:// chunk needs
#: them on the node. (coffea, heavy and bringing matplotlib, travels when asked: --with coffea.)
INSTALLED_EXTRAS = ("xrootd", "fsspec-xrootd")
KEEP_PACKS = 3           # the cache keeps this many packs (and installed sites)


class PackError(RuntimeError, RhtcError):
    """The worker environment could not be built; the message says why and what to try."""


class PinWarning(UserWarning):
    """Some packages could not be pinned to the client's versions for the nodes' Python."""


# How pip names a pin it cannot satisfy (no wheel of that version for the target Python).
_PIN_FAILURES = (r"\(constraint\) ([A-Za-z0-9][A-Za-z0-9._-]*)==",
                 r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)==",
                 r"satisfies the requirement ([A-Za-z0-9][A-Za-z0-9._-]*)==")


def project_root() -> Path:
    """The directory that holds this project's packages (a checkout, or ``rhtc/`` installed)."""
    return Path(__file__).resolve().parent.parent


def _package_top() -> Path:
    """The folder of ``rhtc/__init__.py`` and the package's top modules: beside the
    subpackage folders in a checkout, above them when installed."""
    root = project_root()
    return root / "rhtc" if (root / "rhtc" / "__init__.py").is_file() else root


def _requirement_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else req.strip().lower()


def project_requirements() -> list[str]:
    """The project's runtime requirements (``install_requires``), without extras.

    Read from ``setup.cfg`` in a source checkout, else from the installed metadata.
    """
    cfg = project_root() / "setup.cfg"
    reqs: list[str] | None = None
    if cfg.is_file():
        parser = configparser.ConfigParser()
        parser.read(cfg)
        raw = parser.get("options", "install_requires", fallback="")
        reqs = [line.strip() for line in raw.splitlines() if line.strip() and not line.strip().startswith("#")]
    if reqs is None:
        try:
            reqs = importlib.metadata.requires(DIST_NAME) or []
        except importlib.metadata.PackageNotFoundError:
            raise PackError(f"cannot find the requirements of {DIST_NAME}: no setup.cfg in "
                            f"{project_root()} and the project is not installed (pip install .)")
    return [r for r in reqs if "extra" not in r.partition(";")[2]]


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def platform_tags(glibc: str = DEFAULT_GLIBC, arch: str | None = None) -> list[str]:
    """pip ``--platform`` tags for a Linux node with glibc ``glibc`` or newer.

    >>> platform_tags("2.19", "x86_64")
    ['manylinux_2_19_x86_64', 'manylinux_2_18_x86_64', 'manylinux_2_17_x86_64', 'manylinux2014_x86_64']
    """
    arch = arch or platform.machine() or "x86_64"
    major, minor = (int(x) for x in glibc.split(".")[:2])
    if major != 2 or minor < 17:
        raise PackError(f"glibc {glibc}: wheels exist for glibc 2.17 and newer only")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 16, -1)]
    return tags + [f"manylinux2014_{arch}"]


def _project_files(packages: Sequence[str]) -> list[tuple[str, Path]]:
    root = project_root()
    files = []
    for pkg in packages:
        pdir = root / pkg
        if not (pdir / "__init__.py").is_file():
            continue
        for path in sorted(pdir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in NODE_SKIP_SUFFIXES:
                files.append((f"rhtc/{path.relative_to(root)}", path))
    files += [(f"rhtc/{path.name}", path) for path in sorted(_package_top().glob("*.py"))]
    if not any(name.startswith("rhtc/worker/") for name, _ in files):
        raise PackError(f"the worker package is not in {root}: run from a checkout or install the project")
    return files


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


@contextlib.contextmanager
def _locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _install_pinned(target: Path, requirements: Sequence[str], lock: Lock, python_version: str,
                    platforms: Sequence[str], pip_args: Sequence[str]) -> list[str]:
    """Install with the lock as pip constraints; drop the pins pip cannot meet for this
    Python; return the dropped names."""
    dropped: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="rhtc-pins-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        while True:
            constraints.write_text("\n".join(lock.constraints(dropped)) + "\n")
            err = _install_site(target, requirements, python_version, platforms,
                                [*pip_args, "--constraint", str(constraints)])
            if err is None:
                break
            names = {canonical(m) for pattern in _PIN_FAILURES for m in re.findall(pattern, err)}
            unmet = (names & set(lock.pins)) - dropped
            if not unmet:
                raise _install_error("\n".join(err.splitlines()[-15:]), python_version, platforms)
            dropped |= unmet
            shutil.rmtree(target, ignore_errors=True)
    return sorted(dropped)


def _install_error(tail: str, python_version: str, platforms: Sequence[str]) -> PackError:
    return PackError(
        f"pip could not install the worker's dependencies for Python {python_version} "
        f"({', '.join(platforms[:1])}...):\n{tail}\n"
        "A requirement without a binary wheel for that Python/platform cannot be packed; "
        "pin another version (--with 'pkg==X'), choose --python-version to match the "
        "nodes, or use a shared filesystem or container image instead."
    )


def _install_site(target: Path, requirements: Sequence[str], python_version: str,
                  platforms: Sequence[str], pip_args: Sequence[str]) -> str | None:
    """``pip install --target``; pip's error output if it failed, else None."""
    cmd = [sys.executable, "-m", "pip", "install", "--target", str(target), "--no-compile",
           "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
           "--disable-pip-version-check", "--no-warn-script-location"]  # not --quiet: it hides which pin failed
    for tag in platforms:
        cmd += ["--platform", tag]
    cmd += list(pip_args) + list(requirements)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return (proc.stdout + proc.stderr).strip()
    # console scripts point at the analyst's interpreter: useless on the node
    shutil.rmtree(target / "bin", ignore_errors=True)
    return None


def _prune(packs: Path, pattern: str, keep: int) -> None:
    entries = sorted(packs.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                old.unlink()


def _remove_leftovers(packs: Path) -> None:
    """Delete the half-written tarballs of packs that were killed while writing (``.tmp-*``):
    each is written under the cache's lock, which the caller holds, so none is in progress.
    Nothing else would ever delete them (``_prune`` keeps only finished packs to its count)."""
    for tmp in packs.glob(".tmp-*.tar.gz"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def pack_environment(output: str | os.PathLike | None = None, *, python_version: str | None = None,
                     glibc: str = DEFAULT_GLIBC, arch: str | None = None,
                     extra: Iterable[str] = (), exclude: Iterable[str] = DEFAULT_EXCLUDE,
                     pip_args: Sequence[str] = (), rebuild: bool = False,
                     quiet: bool = True) -> Path:
    """Build (or reuse) the worker environment tarball; copy it to ``output`` if given.

    Args:
        output: where to put the tarball (default: leave it in the cache and return that path).
        python_version: the execute nodes' ``python3`` as ``"3.X"`` (default: this Python's).
        glibc: oldest glibc of the nodes (wheels up to ``manylinux_<glibc>`` are accepted).
        arch: the nodes' machine type (default: this machine's, e.g. ``x86_64``).
        extra: more requirements for your own functions, e.g. ``["coffea", "vector>=1"]``;
            pinned to this environment's versions when installed here.
        exclude: requirements to leave out (by name; default ``matplotlib``); also stops an
            installed package of :data:`INSTALLED_EXTRAS` from travelling.
        pip_args: passed to pip, e.g. ``["--no-index", "--find-links", "/wheels"]``.
        rebuild: ignore the cache.

    Example::

        >>> p = pack_environment(python_version="3.13")        # doctest: +SKIP
        >>> p.name                                              # doctest: +SKIP
        'rhtc-env-3.13-5f0c8e1d2a3b4c6d.tar.gz'
    """
    python_version = python_version or "%d.%d" % sys.version_info[:2]
    if not re.fullmatch(r"3\.\d+", python_version):
        raise PackError(f"python_version must look like 3.11, not {python_version!r}")
    platforms = platform_tags(glibc, arch)
    excluded = {_requirement_name(x) for x in exclude}
    requirements = [r for r in project_requirements() if _requirement_name(r) not in excluded]
    requirements += [r for r in extra if r]
    asked = {_requirement_name(r) for r in requirements}
    requirements += [name for name in INSTALLED_EXTRAS
                     if name not in asked and name not in excluded and _installed(name)]
    lock = lock_environment(requirements)
    files = _project_files(PROJECT_PACKAGES)
    dep_key = _digest({"format": PACK_FORMAT, "python": python_version, "platforms": platforms,
                       "requirements": sorted(requirements), "lock": lock.pins,
                       "pip_args": list(pip_args)})[:16]
    src_key = _digest([(name, hashlib.sha256(path.read_bytes()).hexdigest()) for name, path in files])
    key = _digest([dep_key, src_key])[:16]

    packs = cache_dir() / "packs"
    tarball = packs / f"rhtc-env-{python_version}-{key}.tar.gz"
    with _locked(packs):
        _remove_leftovers(packs)
        if rebuild or not tarball.is_file():
            site = packs / f"site-{python_version}-{dep_key}"
            if rebuild or not (site / ".complete").is_file():
                shutil.rmtree(site, ignore_errors=True)
                t0 = time.monotonic()
                if not quiet:
                    print(f"installing {len(requirements)} requirements for Python {python_version} "
                          f"into {site} ...", file=sys.stderr)
                dropped = _install_pinned(site, requirements, lock, python_version, platforms, pip_args)
                (site / ".complete").write_text(json.dumps(
                    {"seconds": round(time.monotonic() - t0, 1), "dropped": dropped}))
            os.utime(site)
            dropped = json.loads((site / ".complete").read_text())["dropped"]
            manifest = {"format": PACK_FORMAT, "python": python_version, "platforms": platforms,
                        "requirements": requirements, "key": key,
                        "client_python": "%d.%d.%d" % sys.version_info[:3],
                        "lock": {n: v for n, v in sorted(lock.pins.items()) if n not in dropped},
                        "not_pinned": sorted(set(dropped) | set(lock.missing)),
                        "packages": sorted(
                            {name.split("/")[1] for name, _ in files if name.count("/") > 1}),
                        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            fd, tmp = tempfile.mkstemp(dir=packs, prefix=".tmp-", suffix=".tar.gz")
            os.close(fd)
            try:
                with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
                    data = json.dumps(manifest, indent=1).encode()
                    info = tarfile.TarInfo("manifest.json")
                    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                    tar.addfile(info, io.BytesIO(data))
                    tar.add(site, arcname="site", filter=_skip_marker)
                    for name, path in files:
                        tar.add(path, arcname=f"src/{name}")
                os.chmod(tmp, 0o644)
                os.replace(tmp, tarball)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            _prune(packs, "rhtc-env-*.tar.gz", KEEP_PACKS)
            _prune(packs, "site-*", KEEP_PACKS)
        else:
            os.utime(tarball)
        if output is not None:           # copied under the lock: another pack cannot prune it first
            output = Path(output)
            if output.is_dir():
                output = output / "rhtc-env.tar.gz"
            tmp_out = output.with_name(f".{output.name}.tmp{os.getpid()}")
            shutil.copyfile(tarball, tmp_out)
            os.chmod(tmp_out, 0o644)
            os.replace(tmp_out, output)
    _warn_unpinned(read_manifest(output or tarball), lock)
    return output or tarball


def _warn_unpinned(manifest: dict, lock: Lock) -> None:
    dropped = sorted(n for n in manifest["not_pinned"] if n in lock.pins)
    if dropped:
        import warnings
        python, platform_tag = manifest["python"], manifest["platforms"][0]
        warnings.warn(
            f"the worker pack for Python {python} could not pin "
            + ", ".join(f"{n}=={lock.pins[n]}" for n in dropped)
            + f" (the client's versions have no wheel for Python {python} / {platform_tag}); "
            "pip chose other versions there (see the pack's manifest.json). Results that pickle "
            "these packages' objects may not unpickle on the client: run the client on the "
            "nodes' Python to pin everything.", PinWarning, stacklevel=3)


def _skip_marker(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if info.name == "site/.complete" or "__pycache__" in info.name:
        return None
    return info


def read_manifest(tarball: str | os.PathLike) -> dict:
    """The manifest of a pack: ``{"python": "3.13", "requirements": [...], "key": ...}``."""
    with tarfile.open(tarball, "r:gz") as tar:
        fh = tar.extractfile("manifest.json")
        if fh is None:
            raise PackError(f"{tarball} has no manifest.json: it was not made by `rhtc pack`")
        return json.load(fh)
