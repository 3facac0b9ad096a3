"""Which versions of the analysis stack this process runs (rhtc/versions.py), as a worker's
heartbeat carries them: Python's own and each installed package of the stack, as the
installed metadata says, packages that are not installed left out, and the caller's copy its
own to change. A worker with other versions than the client's, on real workers:
tests/scenarios/test_a_worker_with_other_versions.py."""
from __future__ import annotations

import importlib.metadata as md
import sys

from rhtc import versions
from rhtc.versions import STACK, stack_versions


def _installed(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def test_python_and_every_installed_package_of_the_stack_are_named():
    got = stack_versions()
    assert got["python"] == "%d.%d.%d" % sys.version_info[:3]
    want = {name: _installed(name) for name in STACK}
    assert {k: v for k, v in got.items() if k != "python"} == {k: v for k, v in want.items() if v is not None}
    assert got["redis-htcondor"] and got["numpy"] == md.version("numpy")


def test_a_package_that_is_not_installed_is_left_out(monkeypatch):
    monkeypatch.setattr(versions, "STACK", ("numpy", "no-such-package-here"))
    versions._read_versions.cache_clear()
    try:
        assert set(stack_versions()) == {"python", "numpy"}
    finally:
        versions._read_versions.cache_clear()


def test_each_caller_gets_its_own_copy():
    mine = stack_versions()
    mine["numpy"] = "changed"
    assert stack_versions()["numpy"] == md.version("numpy")
