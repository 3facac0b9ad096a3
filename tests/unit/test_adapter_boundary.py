"""Every Redis command of the project lives in the adapter (DESIGN.md: "No other folder
spells a Redis key or calls a Redis command directly"): outside the modules listed here,
no module imports redis and none reaches a raw client through an attribute ``.r``. The
roles of the adapter are reached as ``storage.maps``, ``storage.lease`` and
``storage.pool`` (broker/storage.py). Parses the sources; runs nothing."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
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
    "broker/inflight.py",     # walks across a map's queues (audit, cancel)
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
        assert (ROOT / rel).is_file(), f"{rel} is listed in tests/unit/test_adapter_boundary.py but does not exist"


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


#: the wire vocabulary: what client and worker agree on, no Redis (broker/wire/)
WIRE = ROOT / "broker" / "wire"


def adapter_imports(path: Path) -> list[str]:
    """The imports in ``path`` (a module of ``broker/wire/``) that leave the vocabulary
    for the adapter: a relative import of a module of ``broker/`` outside ``wire/``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module is not None:
            if node.module.split(".")[0] == "wire":
                continue
            out.append(f"line {node.lineno}: from ..{node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and node.level == 2:
            out += [f"line {node.lineno}: from .. import {a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("rhtc.broker.") \
                and not node.module.startswith("rhtc.broker.wire"):
            out.append(f"line {node.lineno}: from {node.module} import ...")
    return out


def test_the_wire_vocabulary_imports_neither_redis_nor_the_adapter():
    modules = sorted(p for p in WIRE.glob("*.py"))
    assert len(modules) > 10, f"broker/wire/ holds {len(modules)} modules"
    wrong = {p.name: raw_uses(p) + adapter_imports(p) for p in modules}
    wrong = {name: found for name, found in wrong.items() if found}
    assert not wrong, ("the wire vocabulary (broker/wire/) reaches Redis or the adapter; it is what client and "
                       f"worker agree on, so keep Redis commands in broker/ beside it: {wrong}")


def test_importing_the_whole_vocabulary_loads_no_redis():
    names = sorted(p.stem for p in WIRE.glob("*.py") if p.stem != "__init__")
    code = ("import sys, importlib\n"
            f"for n in {names!r}: importlib.import_module('rhtc.broker.wire.' + n)\n"
            "print(sorted(m for m in sys.modules if m == 'redis' or m.startswith('redis.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]", f"importing rhtc.broker.wire loaded redis: {out.stdout.strip()}"


def test_the_wire_check_sees_an_adapter_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..storage import Storage\nfrom rhtc.broker.link import Link\nfrom ..wire import keys\n")
    assert len(adapter_imports(bad)) == 2
