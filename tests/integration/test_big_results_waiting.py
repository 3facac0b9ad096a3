"""Results of many megabytes waiting in Redis (a client behind its workers) never stall
the broker: a fetch pops about 64 MiB at a time, and the client's audit (which reads every
place a task may be, inside Lua) waits until the waiting results are read."""
from __future__ import annotations

from rhtc.broker.storage import FETCH_BYTES
from rhtc.client.engine.maprun import MapRun


def test_a_fetch_pops_about_64_mib_of_big_results(storage):
    key = storage.keys.results("0123456789abcdef")
    frame = b"R" * (4 * 2**20)
    storage.r.rpush(key, *[frame] * 40)
    sizes = []
    while got := storage.maps.fetch_results("0123456789abcdef", timeout=0):
        sizes.append(len(got))
    assert sum(sizes) == 40
    assert max(sizes) * len(frame) <= FETCH_BYTES          # never the whole list in one reply


def test_the_audit_waits_while_results_are_unread(storage):
    run = MapRun(storage, abs, [-1, -2, -3])
    run.submit()                                           # no worker: the tasks wait in the queue
    storage.r.rpush(storage.keys.results(run.map_id), b"R" * 1000)

    def audit_map(map_id):
        raise AssertionError("the audit read the broker while results waited unread")
    storage.maps.audit = audit_map
    run.state.last_progress -= 60                                # as stalled as can be
    run.upkeep._audit()
    assert run.state.missing == set() and run.resubmissions == 0   # nothing found, nothing sent
    storage.r.delete(storage.keys.results(run.map_id))
    del storage.maps.audit
    run.cancel()
