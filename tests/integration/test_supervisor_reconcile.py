"""What the task process tells its supervisor (worker/shared.py) is never guessed: the
supervisor's reconcile (worker/supervisor.py), in this process, against a real redis-server.

The supervisor reads what the task process holds through a seqlock. It used to give up
after a fraction of a second of a write in progress and read "nothing held"; its reconcile
then requeued every task of the worker's open partial as "not running here". Those tasks
ran again elsewhere, and the partial that already covered them was refused whole at the
map's end. ``bench scale`` saw it at 1,000 light workers x 2 MB (a hundred task loops per
process wait for the GIL inside their writes): 7-10 workers a run "took part in
nothing" and the map ended 20-30 s late. A task process frozen inside a write (SIGSTOP,
a task's own thread holding the GIL) does the same to a real worker. The seqlock's reads
alone: tests/unit/worker/test_shared.py."""
from __future__ import annotations

import threading

import pytest

from rhtc import context
from rhtc.broker.wire import keys, protocol
from tests.kits.worker import frozen_inside_a_write


def _supervisor_holding(storage, name: str):
    """A supervisor that holds ``name`` (not started: the test beats for it), and a lease
    entry of its incarnation older than one lease: (supervisor, lease key, [task ids 1, 2],
    a function that leases task id ``tid`` to it that long ago)."""
    from rhtc.worker.supervisor import Supervisor

    sup = Supervisor(storage.config, name=name, settings_=storage.settings, storage=storage)
    sup.claim()
    lease = storage.keys.lease(name)
    old = sup.incarnation.ljust(keys.INCARNATION_LEN, "0") + "0" * keys.LEASE_TIME_LEN
    tids = [protocol.TaskRef("0123456789abcdef", i).task_id for i in (1, 2)]
    return sup, lease, tids, lambda tid: storage.r.hset(lease, tid, old + "a frame")


def test_a_supervisor_does_not_requeue_what_a_frozen_writer_holds(storage):
    """The lease holds a task of this incarnation, older than one lease, that the task
    process holds (in its partial). With the writer frozen inside a write, the reconcile
    leaves it (and tries again at the next beat); once the write ends it reconciles as
    before: the held entry stays, an entry nobody holds goes back."""
    sup, lease, (held, stray), lease_old = _supervisor_holding(storage, "frozen-writer")
    lease_old(held)
    sup.shared.set_held([held])
    frozen_inside_a_write(sup.shared)
    assert sup.beat()
    assert storage.r.hexists(lease, held), "the reconcile requeued a task its task process holds"
    assert sup._next_reconcile == 0.0, "the skipped reconcile was not left for the next beat"
    sup.shared.b.seq += 1                            # the write ends
    lease_old(stray)
    assert sup.beat()
    assert storage.r.hexists(lease, held)
    assert not storage.r.hexists(lease, stray), "the reconcile did not run once the write ended"


def test_a_supervisor_does_not_judge_its_lease_while_a_lease_is_in_flight(storage):
    """A merger was handed others' partials (leased here) and its task loop has not run
    since (its reply waits in the socket for a thread the scheduler starves): the
    partial's entry is older than one lease and in no held list. The reconcile leaves it
    until the task process has written what it holds; then an entry it does not hold goes
    back (a lost reply, as before)."""
    sup, lease, (own, given), lease_old = _supervisor_holding(storage, "slow-merger")
    lease_old(own)
    sup.shared.set_held([own])
    sup.shared.set_leasing()                         # merge_up sent; its reply not read yet
    lease_old(given)                                 # what merge.lua leased here
    assert sup.beat()
    assert storage.r.hexists(lease, given), "the reconcile requeued what a lease in flight gave this worker"
    sup.shared.set_held([own])                       # its reply lost: the task loop holds only its own
    assert sup.beat()
    assert storage.r.hexists(lease, own) and not storage.r.hexists(lease, given)


@pytest.mark.timeout(180)     # (on a fresh machine it may wait for the toxiproxy build: tests/conftest.py)
def test_a_result_the_broker_refused_stays_held_until_it_is_handed_in(broker, storage, tmp_path, monkeypatch):
    """A task process's hand-in fails (its connection cut; the supervisor's still works):
    the results and partials it keeps in its outbox to send again are still leased here,
    so they stay in what it tells its supervisor. The reconcile used to read "nothing
    held" after the failure and requeue them; their tasks ran again elsewhere, and the
    hand-in that followed was refused (its leases gone): work done twice."""
    from rhtc.bench.toxiproxy import Toxiproxy
    from rhtc.bench.chaospool import proxied_url
    from rhtc.broker.wire.config import BrokerConfig
    from rhtc.broker.wire.resultmeta import ResultMeta, encode_result
    from rhtc.worker.main import TaskProcess

    from tests.helpers import wait_until

    sup, lease, (done, _), lease_old = _supervisor_holding(storage, "refused-hand-in")
    with Toxiproxy() as toxiproxy:
        proxy = toxiproxy.proxy("redis", upstream=f"127.0.0.1:{broker.port}")
        config = BrokerConfig(proxied_url(broker.config.url, proxy), broker.config.key, broker.config.namespace)
        monkeypatch.setattr(context, "current", context.current)   # a task process makes itself current
        tp = TaskProcess(config, "refused-hand-in", sup.incarnation, sup.shared, cache_bytes=1 << 20,
                         settings_=storage.settings)
        ref = protocol.TaskRef.from_task_id(done)
        meta = ResultMeta(worker="refused-hand-in", host="h", pid=1, start=0.0, stop=1.0)
        tp.outbox.frames.append((ref.map_id, done, protocol.pack_result(
            broker.config.key, ref.map_id, ref.index, protocol.OK, encode_result(protocol.dumps(42), meta))))
        lease_old(done)                              # the task ran; its lease is older than one lease
        refused = threading.Event()
        keep = tp.outbox.refused
        tp.outbox.refused = lambda err: (keep(err), refused.set())
        proxy.cut()
        loop = threading.Thread(target=tp.serve, daemon=True)
        loop.start()
        try:
            assert refused.wait(20), "the task process never tried to hand its result in"
            assert sup.beat()                        # the reconcile, on the supervisor's own connection
            assert storage.r.hexists(lease, done), \
                "the reconcile requeued a result its task process keeps to send again"
            proxy.restore()
            wait_until(lambda: not storage.r.hexists(lease, done), 20, "the result to be handed in")
            queued = storage.r.lrange(storage.keys.shared_queue, 0, -1) + \
                storage.r.lrange(storage.keys.queue("refused-hand-in"), 0, -1)
            assert not queued, f"the task was sent again: {queued}"
        finally:
            tp.stopping = True
            proxy.restore()
            tp.wake()                                # an idle wait in progress ends now
            loop.join(20)
        assert not loop.is_alive(), "the task loop did not stop"
