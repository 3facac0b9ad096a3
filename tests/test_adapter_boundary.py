"""Every Redis command of the project lives in the adapter (DESIGN.md: "No other folder
spells a Redis key or calls a Redis command directly"): outside the modules listed here,
no module imports redis and none reaches a raw client through an attribute ``.r``. The
roles of the adapter are reached as ``storage.maps``, ``storage.lease`` and
``storage.pool`` (broker/storage.py). Parses the sources; runs nothing."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rhtc

ROOT = Path(rhtc.__file__).resolve().parent.parent
FOLDERS = ("client", "worker", "condor", "bench", "rhtc", "broker")

#: the Redis adapter: the connection, its roles, the scripts' callers, the embedded server
ADAPTER = {
    "broker/storage.py",      # Storage: the connection and its three roles
    "broker/link.py",         # the connection the roles share
    "broker/mapqueue.py",     # the client's map queue
    "broker/leases.py",       # the worker's lease
    "broker/pool.py",         # the operator's pool view
    "broker/inflight.py",     # walks across every queue (audit, cancel)
    "broker/feed.py",         # the dashboard's feed and address
    "broker/functions.py",    # the scripts, loaded and called
    "broker/fastlane.py",     # the hot path's connection
    "broker/embedded.py",     # the embedded redis-server
}
#: outside the adapter, allowed by name, and why
ALLOWED = {
    "broker/errors.py": "imports redis's parser classes and exception types to name the broker's refusals",
    "bench/floor.py": "the bare Redis queue that `bench overhead` measures us against (a floor, not the project)",
}


def sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def raw_uses(path: Path) -> list[str]:
    """``import redis``, ``from redis...`` and attribute ``.r`` uses in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "redis"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "redis":
            out.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr == "r":
            out.append(f"line {node.lineno}: {ast.unparse(node)} (a raw Redis client)")
    return out


def test_the_adapter_and_the_allowed_modules_exist():
    for rel in (*ADAPTER, *ALLOWED):
        assert (ROOT / rel).is_file(), f"{rel} is listed in tests/test_adapter_boundary.py but does not exist"


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_module_outside_the_adapter_touches_redis(folder):
    wrong = {}
    for p in sources():
        rel = p.relative_to(ROOT).as_posix()
        if rel.split("/")[0] == folder and rel not in ADAPTER and rel not in ALLOWED:
            found = raw_uses(p)
            if found:
                wrong[rel] = found
    assert not wrong, ("Redis reached outside the adapter (call a role of Storage instead: storage.maps, "
                       f"storage.lease, storage.pool; see broker/storage.py): {wrong}")


def test_the_check_sees_a_raw_use(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import redis\nfrom redis.exceptions import ResponseError\ndef f(run):\n"
                   "    return run.storage.r.exists('k')\n")
    assert len(raw_uses(bad)) == 3
