"""One schema per message: the task error, the error kinds, the requeue outcomes shared
with Lua, the counts of a run and a worker's metrics are each written once, in
broker/wire/messages.py, and every reader derives its own from there; and every error
the library raises is an ``RhtcError``. Parses and imports the sources, no Redis. (The
node's CPU reaching the run record of a real map: tests/scenarios/test_node_cpu_reaches_the_run_record.py.)"""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import rhtc
from rhtc.broker import scripts
from rhtc.broker.wire import messages
from rhtc.broker.wire.messages import (BYTES_SOURCES, RUN_COUNTERS, WORKER_METRICS, ErrorKind, Requeued, ResultMeta,
                                  TaskError)
from rhtc.client.engine.ledger import Ledger
from rhtc.client.reports.record import MetricSample, RunRecord, TaskRecord
from rhtc.client.engine.upkeep import METRIC_KEYS
from rhtc.errors import RhtcError
from rhtc.worker.metrics import NodeMetrics

ROOT = Path(rhtc.__file__).resolve().parent.parent
PACKAGE = ("broker", "worker", "client", "condor", "bench", "rhtc")


def test_the_counts_of_a_run_reach_the_ledger_the_record_and_the_timeline():
    meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0,
                      **{name: 10 + i for i, name in enumerate(RUN_COUNTERS)})
    led = Ledger(1)
    led.add(0, meta, received=2.5)
    (row,) = led.metas()
    assert {name: row[name] for name in RUN_COUNTERS} == {name: getattr(meta, name) for name in RUN_COUNTERS}
    assert row["bytes_read"] == meta.bytes_read == sum(getattr(meta, n) for n in BYTES_SOURCES)
    task = TaskRecord.from_meta(row)
    assert {name: getattr(task, name) for name in RUN_COUNTERS} == {name: row[name] for name in RUN_COUNTERS}
    rec = RunRecord(start=0.0)
    rec.add_task(row)
    assert RunRecord.from_dict(rec.to_dict()) == rec
    assert set(RUN_COUNTERS) <= {f.name for f in dataclasses.fields(TaskRecord)}
    assert "bytes_disk" in RUN_COUNTERS and "bytes_disk" in BYTES_SOURCES


def test_a_disk_hit_has_its_own_colour_in_the_timeline():
    from rhtc.client.reports.timeline import COLOURS, LABELS
    task = TaskRecord(index=0, worker="w", start=0.0, stop=1.0, bytes_disk=5)
    assert task.source == "disk" and task.source in COLOURS and task.source in LABELS
    assert len(set(COLOURS.values())) == len(COLOURS)


def test_the_worker_metrics_are_listed_once():
    sample = NodeMetrics().sample()
    assert set(sample) <= set(WORKER_METRICS), set(sample) - set(WORKER_METRICS)
    assert [f.name for f in dataclasses.fields(MetricSample)] == ["t", "worker", *WORKER_METRICS]
    assert METRIC_KEYS == ("t", *WORKER_METRICS)
    status_fields = {f.name for f in dataclasses.fields(messages.WorkerStatus)}
    assert set(WORKER_METRICS) <= status_fields | set(sample) | {"net_recv", "net_sent"}


def test_a_task_error_travels_whole():
    e = TaskError("OSError", "gone", "Traceback (most recent call last):\n...", "Chunk(a.root 0-10)", b"pickled")
    assert TaskError.from_wire(e.to_wire()) == e
    assert TaskError.from_wire({"type": "ValueError", "message": "bad", "argument": None}) == \
        TaskError("ValueError", "bad")
    assert TaskError.from_wire(TaskError("X")) == TaskError("X")


def _calls(name: str):
    for folder in PACKAGE:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == name:
                    yield path.relative_to(ROOT), node


def test_no_remote_error_kind_is_a_bare_string():
    """A RemoteError that is not the user's exception names its kind from ErrorKind."""
    bare = [f"{path}:{node.lineno} {ast.literal_eval(node.args[1])!r}" for path, node in _calls("RemoteError")
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant)]
    assert not bare, f"use broker.wire.messages.ErrorKind: {bare}"
    kinds = {k.value for k in ErrorKind}
    assert {"WorkerLost", "WorkerRefused", "ResultTooLarge", "TaskTimeout"} <= kinds


def test_the_lua_scripts_name_the_requeue_outcomes_from_python():
    prelude = scripts.prelude()
    for outcome in Requeued:
        assert f"local REQUEUED_{outcome.name} = '{outcome.value}'" in prelude
    lua = "\n".join(p.read_text() for p in (ROOT / "broker" / "lua").glob("*.lua"))
    code = "\n".join(line.split("--")[0] for line in lua.splitlines())
    spelled = re.findall(r"""['"](queued|dead|gone)['"]""", code)
    assert not spelled, f"the Lua spells outcomes itself: {spelled}"


#: exception classes that are not errors of the library: control flow, private, a warning
NOT_LIBRARY_ERRORS = {"RhtcError", "HandBack", "_SystemFault", "PinWarning"}


def test_every_library_error_is_an_rhtc_error():
    wrong = []
    for folder in PACKAGE:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef) or node.name in NOT_LIBRARY_ERRORS:
                    continue
                bases = [ast.unparse(b) for b in node.bases]
                if any(re.search(r"(Error|Exception|Unavailable)\b", b) for b in bases) and \
                        not any(re.search(r"RhtcError|Error$", b) and _is_ours(b) for b in bases):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({', '.join(bases)})")
    assert not wrong, f"make these inherit rhtc.errors.RhtcError: {wrong}"


def _is_ours(base: str) -> bool:
    """A base that is RhtcError or one of the library's own errors."""
    import importlib
    if base == "RhtcError":
        return True
    for module in ("rhtc.client.errors", "rhtc.broker.errors", "rhtc.broker.wire.config", "rhtc.condor.pack",
                   "rhtc.client.data.xrootd", "rhtc.client.data.freshness"):
        cls = getattr(importlib.import_module(module), base.split(".")[-1], None)
        if isinstance(cls, type) and issubclass(cls, RhtcError):
            return True
    return False


@pytest.mark.parametrize("name", ["RemoteError", "ChunkFileError", "BranchNotFound", "BrokerLost", "BrokerFull",
                                  "MapCancelled", "KeyMismatch", "WorkItemFailed", "BrokerNotConfigured"])
def test_the_public_errors_share_one_root(name):
    assert issubclass(getattr(rhtc, name), rhtc.RhtcError)
