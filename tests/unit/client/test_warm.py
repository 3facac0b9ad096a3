"""``rhtc warm`` (client/warm.py) from a run record, without processes: a record of a big
map holds each branch list and file once and plans the warm of every chunk; a record
without the list (as an older redis-htcondor wrote it) is refused, naming the run and what
to do, in Python and on the command line. With real workers:
tests/scenarios/test_warm_fills_a_new_pool_from_a_run_record.py."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rhtc.client.data.chunks import Chunk
from rhtc.client.ops.cli import main as cli
from rhtc.client.reports.record import RunRecord
from rhtc.client.warm import WarmRefused, warm, warm_plan


def test_a_million_task_record_holds_each_branch_list_once():
    """What a big map costs in its record: a few dozen characters a task, the branch list
    and the file once, however many tasks read them."""
    chunks = [Chunk("/store/x/nano.root", "Events", i * 100, i * 100 + 100, "u1") for i in range(20_000)]
    rec = RunRecord(map_id="big", function="f", n_tasks=len(chunks))
    rec.use_arguments(chunks)
    text = "Muon_pt,Muon_eta,Muon_phi,Muon_mass,Muon_charge,nMuon,Jet_pt@np"
    for i in range(len(chunks)):
        rec.add_task({"index": i, "worker": "w", "start": 0, "stop": 1, "reads": text})
    reads = rec.to_dict()["reads"]
    assert len(reads["files"]) == 1 and len(reads["branch_lists"]) == 1
    assert len(json.dumps(reads)) / len(chunks) < 40
    again = RunRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert again.reads == rec.reads
    plan = warm_plan(again)
    assert [c.routing_key for c in plan] == [c.routing_key for c in chunks]
    assert plan[0].branches[-1] == ("Jet_pt", "np")


def test_a_record_without_the_list_is_refused_naming_the_run_and_what_to_do(tmp_path):
    rec = RunRecord(map_id="ab12cd", function="dimuon", n_tasks=4)
    rec.add_task({"index": 0, "worker": "w", "start": 0, "stop": 1, "bytes_file": 10})
    path = rec.save(tmp_path / "old.json")
    assert "reads" not in json.loads(path.read_text())         # as an older redis-htcondor wrote it
    with pytest.raises(WarmRefused, match="map ab12cd \\(dimuon\\) does not say which branches.*run the analysis once"):
        warm(path)
    out = CliRunner().invoke(cli, ["warm", str(path)])
    assert out.exit_code == 1 and "map ab12cd (dimuon) does not say which branches" in out.output
    out = CliRunner().invoke(cli, ["warm"])
    assert out.exit_code == 1 and "rhtc warm run.json" in out.output
    with pytest.raises(WarmRefused, match="no run record at"):
        warm(tmp_path / "missing.json")
