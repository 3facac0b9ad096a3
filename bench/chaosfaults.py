"""The faults of ``bench chaos`` and tests/scenarios/test_exactly_once_under_chaos.py, scheduled on the map's progress.

A seed gives a plan (:func:`plan_faults`): one fault of each kind first, in a random order,
then more at random; each fault names the number of results the map must have received
before it fires, how long it lasts and what it hits. The :class:`Injector` fires the plan
in order while the map runs, and the map cannot end before the plan is done: its last
task waits at a gate (:func:`wait_at_gate`) that the injector opens only after the last
fault has fired. So every fault of the plan is injected into a running map, whatever
the speed of the machine: the test asserts on the plan, not on wall-clock luck.

    >>> plan = plan_faults(seed=7, tasks=5000, extra=3)
    >>> sorted({f.kind for f in plan[:len(FAULT_KINDS)]}) == sorted(FAULT_KINDS)
    True
    >>> plan == plan_faults(seed=7, tasks=5000, extra=3), len(plan)
    (True, 8)
"""
from __future__ import annotations

import collections
import dataclasses
import os
import random
import threading
import time
from typing import Callable

FAULT_KINDS = ("cut", "lost replies", "latency", "reset peer", "sigkill + restart")
#: faults fire while the map has received between these fractions of its results (the
#: rest may be held in the workers' open partials or behind the gate)
FIRST_AT, LAST_AT = 0.01, 0.5
#: the least map a fault plan fits in (a worker's open partial holds up to 64 results)
MIN_TASKS = 400
GATE_POLL = 0.05


@dataclasses.dataclass(frozen=True)
class Fault:
    """One planned fault: ``kind`` fires once the map has received ``at`` results and
    ``gap`` seconds after the previous fault ended; it lasts ``seconds``; ``strength`` is
    the toxic's parameter (ms) and ``pick`` (0..1) chooses the victim of a kill."""

    at: int
    kind: str
    gap: float
    seconds: float
    strength: int
    pick: float


def plan_faults(seed: int, tasks: int, extra: int = 25) -> list[Fault]:
    """The seed's faults for a map of ``tasks`` tasks: one of each of :data:`FAULT_KINDS`
    (shuffled), then ``extra`` drawn at random, at progress points spread over the first
    half of the map. Each network outage lasts under a quarter of a 2 s lease and outages
    are 0.3 s apart or more, so a worker that heartbeats through them is never rightly
    taken for dead."""
    if tasks < MIN_TASKS:
        raise ValueError(f"a fault plan needs a map of {MIN_TASKS} tasks or more, not {tasks}")
    rng = random.Random(f"faults-{seed}")
    kinds = list(FAULT_KINDS)
    rng.shuffle(kinds)
    kinds += [rng.choice(FAULT_KINDS) for _ in range(extra)]
    ats = sorted(rng.randint(int(FIRST_AT * tasks), int(LAST_AT * tasks)) for _ in kinds)
    out = []
    for at, kind in zip(ats, kinds):
        if kind == "latency":
            seconds, strength = rng.uniform(0.5, 2.0), rng.randint(10, 80)
        elif kind == "reset peer":
            seconds, strength = rng.uniform(0.05, 0.3), 0
        else:              # cut, lost replies (connections close after `strength` ms), kill
            seconds, strength = rng.uniform(0.2, 0.5), rng.randint(100, 400)
        out.append(Fault(at, kind, round(rng.uniform(0.3, 0.8), 3), round(seconds, 3), strength,
                         round(rng.random(), 4)))
    return out


def wait_at_gate(gate: str) -> None:
    """The map's last task: note that it runs (``gate.runs``), then wait until the file
    ``gate`` exists (the injector made it: every fault has fired)."""
    with open(gate + ".runs", "a") as fh:
        fh.write(f"{os.getpid()}\n")
    while not os.path.exists(gate):
        time.sleep(GATE_POLL)
    with open(gate + ".runs", "a") as fh:
        fh.write("done\n")


def running_somewhere(marker: str) -> bool:
    """Whether a task that notes its runs in ``marker`` (a pid line when it starts, ``done``
    when it ends) runs now."""
    try:
        with open(marker) as fh:
            lines = fh.read().split()
    except FileNotFoundError:
        return False
    return lines.count("done") < len(lines) - lines.count("done")


class Injector(threading.Thread):
    """Fires ``plan`` on ``pool`` (a :class:`bench.chaospool.ChaosPool`) as the map's
    ``progress()`` (results received) passes each fault's ``at``; counts them by kind;
    then makes the file ``gate``. ``spared`` maps the labels of tasks whose worker is
    never killed (they test the lease, not the retry limit) to the files where they note
    their runs: a kill waits while such a task runs on a worker not yet known."""

    def __init__(self, pool, plan: list[Fault], progress: Callable[[], int], gate: str,
                 spared: dict[str, str]):
        super().__init__(name="chaos-injector", daemon=True)
        self.pool, self.plan, self.progress, self.gate, self.spared = pool, plan, progress, gate, spared
        self.stop = threading.Event()
        self.counts: collections.Counter = collections.Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for fault in self.plan:
                while self.progress() < fault.at:
                    if self.stop.wait(GATE_POLL):
                        return
                if self.stop.wait(fault.gap):
                    return
                while not self._inject(fault):          # a kill waits for a worker it may take
                    if self.stop.wait(0.1):
                        return
                self.counts[fault.kind] += 1
        except BaseException as err:                    # handed to the caller
            self.error = err
        finally:
            open(self.gate, "a").close()

    def _inject(self, fault: Fault) -> bool:
        proxy = self.pool.proxy
        if fault.kind == "cut":
            proxy.cut()
            self.stop.wait(fault.seconds)
            proxy.restore()
        elif fault.kind == "lost replies":      # replies stop; connections close after `strength` ms
            toxic = proxy.add_toxic("timeout", stream="downstream", timeout=fault.strength)
            self.stop.wait(fault.seconds)
            proxy.remove_toxic(toxic)
        elif fault.kind == "latency":
            toxic = proxy.add_toxic("latency", stream="downstream", latency=fault.strength, jitter=10)
            self.stop.wait(fault.seconds)
            proxy.remove_toxic(toxic)
        elif fault.kind == "reset peer":
            toxic = proxy.add_toxic("reset_peer", stream="upstream", timeout=0)
            self.stop.wait(fault.seconds)
            proxy.remove_toxic(toxic)
        else:
            spared: set[str] = set()
            for label, marker in self.spared.items():
                where = self.pool.running(label)
                if not where and running_somewhere(marker):
                    return False                # it runs on a worker not known yet
                spared |= where
            victims = sorted(n for n, p in self.pool.procs.items() if p.poll() is None and n not in spared)
            if not victims:
                return False
            name = victims[int(fault.pick * len(victims)) % len(victims)]
            self.pool.kill(name)
            self.pool.start(name)
        return True
