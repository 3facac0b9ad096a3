"""An idle pool costs the broker little, however many workers it has (issue 20).

Every idle worker asks the take script for work about once a second; when its queues are
empty the script looks for a backed-up queue to steal from. It used to look at every
registered worker's queue (one LLEN each): a thousand idle workers cost a million LLENs
a second. Now it looks only at the queues the enqueue script routed tasks to."""
from __future__ import annotations

import uuid

from rhtc.broker.messages import WorkerStatus


def _register(storage, n: int) -> list[tuple[str, str]]:
    names = []
    for i in range(n):
        name, inc = f"idle-{i:03d}", uuid.uuid4().hex[:12]
        status = WorkerStatus(name=name, host="node-a", pid=1000 + i, incarnation=inc, key_fingerprint="f")
        assert storage.claim(name, inc, status).ok
        names.append((name, inc))
    return names


def _calls(storage, command: str) -> int:
    return int(storage.r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_an_idle_take_does_not_look_at_every_workers_queue(storage):
    pool = _register(storage, 60)
    storage.take(*pool[0], max_tasks=1)                     # loads the script
    storage.r.config_resetstat()
    for name, inc in pool:
        held, _, batch = storage.take(name, inc, max_tasks=1)
        assert held and batch == []
    llens = _calls(storage, "llen")
    assert llens < len(pool), (
        f"60 idle takes ran {llens} LLENs: each idle take looks at every worker's queue "
        "(O(workers²) commands a second for an idle pool)")


def test_the_routed_set_forgets_empty_and_unregistered_queues(storage):
    """The set of routed queues is bounded: a name whose queue is empty (or whose worker
    left) is removed by the first thief that looks at it."""
    (name, inc), (other, _) = _register(storage, 2)
    storage.r.sadd(storage.keys.routed, other, "ghost-worker")   # as if tasks had been routed there
    storage.take(name, inc, max_tasks=1)
    assert storage.r.smembers(storage.keys.routed) == set()
