"""``bench affinity`` at its smallest size, so that it cannot rot: one worker, one file of
6,000 events in three chunks, one repeat, with the real xrootd server and toxiproxy. It
checks behaviour, not speed: the four tiers in order, each served from its own place by
the workers' own counts (the cold ones read the files, the run after every worker was
replaced reads the node's disk tier and opens no file, the warm one is served from RAM),
the JSON's fields and envelope, and that the storage element's reads went through the
proxy, under the bandwidth and latency toxics that make it one."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rhtc.bench import results
from rhtc.bench.affinity import affinity_command
from rhtc.client.synthetic.dimuon import compressed_bytes
from rhtc.examples.dimuon import BRANCHES
from tests.kits.xrootd import served  # noqa: F401  (fixture)

pytest.importorskip("XRootD.client", reason="the [xrootd] extra is not installed")
#: starts an xrootd server, a toxiproxy and three local clusters itself: the full suite only
pytestmark = [pytest.mark.heavy, pytest.mark.timeout(180)]


def test_bench_affinity_serves_each_tier_from_its_place(served, tmp_path):  # noqa: F811
    out = tmp_path / "affinity.json"
    got = CliRunner().invoke(affinity_command, [
        "--workers", "1", "--files", "1", "--events", "6000", "--compression", "LZ4", "--data-dir", str(served),
        "--se-rate", "5", "--se-latency-ms", "2", "--repeats", "1", "--no-progress", "--json", str(out)])
    assert got.exit_code == 0, got.output + repr(got.exception)
    doc = json.loads(out.read_text())
    assert doc["bench"] == "affinity" and all(doc[k] for k in results.ENVELOPE), "when, where, which code, how"
    f = results.figures(doc)
    assert (f["files"], f["events"], f["chunks"], f["workers"], f["repeats"]) == (1, 6000, 3, 1, 1)
    assert f["load_at_start"] >= 0 and f["load_at_end"] >= 0, "how busy the shared machine was"

    tiers = f["tiers"]
    assert list(tiers) == ["se", "local", "disk", "ram"]
    assert tiers["se"]["served"] == tiers["local"]["served"] == {"miss": 1.0}, "cold: every task read its file"
    assert tiers["disk"]["served"] == {"disk": 1.0}, "after every worker was replaced: all from the disk tier"
    assert tiers["ram"]["served"] == {"hit": 1.0}, "warm: all from the workers' memory"
    assert all(t["tasks"] == 3 for t in tiers.values())
    assert tiers["se"]["bytes_file"] > 0 and tiers["local"]["bytes_file"] > 0
    assert tiers["disk"]["bytes_file"] == tiers["ram"]["bytes_file"] == tiers["disk"]["files_opened"] == 0
    assert tiers["disk"]["bytes_disk"] > 0 and tiers["ram"]["bytes_cache"] > 0

    path = served / "lz4" / "nano_gen_000.root"
    assert f["input_mb"] == compressed_bytes(path, BRANCHES) / 1e6 > 0, "input MB: the branches read, as stored"
    assert all(b in f["input"] for b in BRANCHES) and "same for every tier" in f["input"]
    for t in tiers.values():
        assert t["velocity_mb_s_core"] == pytest.approx(f["input_mb"] / t["task_s"])
        assert t["wall_velocity_mb_s_core"] == pytest.approx(f["input_mb"] / t["wall_s"])   # (1 worker)
    assert f["ratios"]["over_local"]["local"] == f["ratios"]["over_se"]["se"] == 1.0
    assert f["ratios"]["over_se"]["local"] == pytest.approx(
        tiers["local"]["velocity_mb_s_core"] / tiers["se"]["velocity_mb_s_core"])

    se = f["se"]
    toxics = {t["type"]: t["attributes"] for t in se["toxics"]}
    assert toxics == {"bandwidth": {"rate": 5000}, "latency": {"latency": 2, "jitter": 0}}
    assert se["url"].startswith("root://127.0.0.1:")
    (through_proxy,) = se["proxy_bytes"]
    assert through_proxy >= tiers["se"]["bytes_file"], "the storage element's bytes all came through the proxy"

    assert all(t["label"] in got.output for t in tiers.values()) and "input:" in got.output
    assert "5 MB/s per connection" in got.output and "+2 ms" in got.output
