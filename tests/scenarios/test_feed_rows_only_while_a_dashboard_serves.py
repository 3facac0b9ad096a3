"""The dashboard's feed (client/engine/feed.py): a map's finished tasks go to the feed's
task stream only while a dashboard serves the namespace; its progress always goes. Nobody
watching, a million-task map would JSON-encode a million rows for nobody. Driven by the
map's progress: its tasks wait at a gate until the map has looked for a dashboard (its
first note is in the feed), so every row is decided after the look."""
from __future__ import annotations

import os
import time

import pytest

from rhtc import submit
from rhtc.broker import feed
from tests.helpers import wait_until


def gated(args):
    gate, i = args
    while not os.path.exists(gate):
        time.sleep(0.01)
    return i


def _notes(storage, map_id: str) -> tuple[int, int]:
    """(task rows, the highest done count) the feed holds for ``map_id``."""
    _, entries = feed.read_feed(storage, "0", count=10_000)
    mine = [e for e in entries if e["map"]["map_id"] == map_id]
    return sum(len(e["tasks"]) for e in mine), max([e["map"].get("done", 0) for e in mine], default=-1)


@pytest.mark.parametrize("dashboard", [False, True])
def test_task_rows_go_to_the_feed_only_while_a_dashboard_serves(broker, workers, storage, tmp_path, dashboard):
    workers.start(2)
    if dashboard:
        feed.announce_dashboard(storage, "http://127.0.0.1:1/", ttl=120)
    gate = str(tmp_path / "gate")
    h = submit(gated, [(gate, i) for i in range(40)], broker=broker)
    wait_until(lambda: _notes(storage, h.map_id)[1] >= 0, 30,       # its first note: it has looked
               "the map to note its progress in the feed", interval=0.1)
    open(gate, "w").close()
    assert sorted(h.wait(60)) == list(range(40))
    wait_until(lambda: _notes(storage, h.map_id)[1] >= 40, 10,      # its last note goes a moment after the end
               "the map's last note to reach the feed", interval=0.1)
    rows, done = _notes(storage, h.map_id)
    assert done == 40
    assert rows == (40 if dashboard else 0), f"{rows} task rows in the feed (dashboard serving: {dashboard})"
