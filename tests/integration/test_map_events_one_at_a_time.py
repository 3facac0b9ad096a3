"""A map's events come from two threads: a handle's collecting thread (results, faults)
and the caller's (cancel, Ctrl-C, a coffea executor giving up after a failed item). The
state takes them one at a time: a cancel never sees a task between two moves of another
event (seen in CI: "failed -> cancelled is not in the transitions table", a coffea run
cancelled while its collector failed an item)."""
from __future__ import annotations

import threading

from rhtc.broker.wire.messages import Fault, FaultKind
from rhtc.client.engine.events import Faulted
from rhtc.client.engine.maprun import MapRun
from rhtc.client.engine.options import MapOptions
from rhtc.client.engine.tasks import TaskState
from tests.helpers import square


class Blocking:
    """An argument whose description (an error names its argument) waits for ``go``."""

    def __init__(self, inside: threading.Event, go: threading.Event):
        self.inside, self.go = inside, go

    def __repr__(self) -> str:
        self.inside.set()
        assert self.go.wait(30), "never released"
        return "Blocking()"

    def __reduce__(self):                     # travels as a plain value (never run here)
        return (str, ("blocking",))


def test_a_cancel_waits_for_the_event_in_hand(storage):
    inside, go = threading.Event(), threading.Event()
    run = MapRun(storage, square, [Blocking(inside, go), 1, 2, 3], MapOptions(stragglers=None))
    fault = Fault(FaultKind.CRASHED, "the task process died", worker="w1")
    faulted = threading.Thread(target=run.apply, args=(Faulted(0, fault, 1.0),))
    faulted.start()
    assert inside.wait(30)                    # the fault's event is in hand, naming the argument
    cancelling = threading.Thread(target=run.cancel)
    cancelling.start()
    cancelling.join(0.5)
    assert cancelling.is_alive(), "the cancel ran while another event was half applied"
    go.set()
    faulted.join(30)
    cancelling.join(30)
    assert run.tasks.state(0) is TaskState.FAILED and run.cancelled
    assert [run.tasks.state(i) for i in (1, 2, 3)] == [TaskState.CANCELLED] * 3
