"""The installed coffea's source distribution: its executor tests and samples, which
``scenarios/test_coffea_contract.py`` runs on ``RedisExecutor``.

Downloaded once per machine and coffea version (``pip download --no-binary :all: --no-deps
coffea==<version>``) and unpacked into rhtc's cache (``$RHTC_CACHE/tools/coffea-sdist-<version>``,
beside the toxiproxy build), never into the repository: a fresh clone reuses it, and
``make test-deps`` fetches it ahead of the suite (``tests/provision.py``).
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

from rhtc.broker.wire.config import cache_dir

try:
    COFFEA_VERSION: str | None = importlib.metadata.version("coffea")
except importlib.metadata.PackageNotFoundError:          # coffea is an optional extra ([coffea])
    COFFEA_VERSION = None
#: the test file of coffea's source distribution that holds its executor tests
EXECUTOR_TESTS = "tests/test_local_executors.py"


class SdistUnavailable(RuntimeError):
    """The source distribution could not be downloaded, or lacks the executor tests."""


def _download(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
           "--disable-pip-version-check", "-d", str(dest), f"coffea=={COFFEA_VERSION}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    found = sorted(dest.glob(f"coffea-{COFFEA_VERSION}.tar.gz"))
    if done.returncode != 0 or not found:
        raise SdistUnavailable(
            f"could not download coffea {COFFEA_VERSION}'s source distribution (its executor tests and samples), "
            f"so coffea's contract is unchecked: `{' '.join(cmd)}` exited with {done.returncode}:\n"
            f"{(done.stdout + done.stderr)[-2000:]}\nGive this machine access to the package index (pip's "
            f"index-url, proxy), or put the file in {dest} by hand, then run the test again.")
    return found[0]


def unpacked_sdist(base: Path | None = None) -> Path:
    """The unpacked tree, downloaded and unpacked once under ``base`` (default: rhtc's cache).
    Two processes may race: each unpacks into a directory of its own and renames it into
    place, so the tree is whole or absent."""
    if COFFEA_VERSION is None:
        raise SdistUnavailable("coffea is not installed here, so there are no executor tests of its to fetch: "
                               "pip install -e '.[coffea]' (or make setup, which installs every extra)")
    base = base or cache_dir() / "tools" / f"coffea-sdist-{COFFEA_VERSION}"
    base.mkdir(parents=True, exist_ok=True)
    tree = base / f"coffea-{COFFEA_VERSION}"
    if not (tree / ".unpacked").exists():
        archive = next(iter(base.glob(f"coffea-{COFFEA_VERSION}.tar.gz")), None) or _download(base)
        staging = base / f"unpacking-{uuid.uuid4().hex}"
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
            (staging / tree.name / ".unpacked").touch()
            try:
                os.rename(staging / tree.name, tree)       # whole, or not at all
            except OSError:
                if not (tree / ".unpacked").exists():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    missing = [p for p in (EXECUTOR_TESTS, "tests/samples/nano_dy.root") if not (tree / p).exists()]
    if missing:
        raise SdistUnavailable(
            f"coffea {COFFEA_VERSION}'s source distribution in {tree} lacks {missing}: this coffea keeps its "
            "executor tests elsewhere. Find them and point EXECUTOR_TESTS (and the plugin) there.")
    return tree
