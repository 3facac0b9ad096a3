"""The worker's partial results (worker/merge.py): a merge on the workers folds into a
value of its own, never into what a task returned (an array a cache serves, or one the
task keeps). In this process, no Redis."""
from __future__ import annotations

import numpy as np

from rhtc.broker.wire.merge import MergePlan
from rhtc.broker.wire.messages import ResultMeta
from rhtc.broker.wire.protocol import TaskRef
from rhtc.worker.merge import Partials
from tests.readonlykit import add_in_place


def test_a_partial_never_folds_into_what_a_task_returned():
    served = np.arange(4.0)                # e.g. an array a cache serves, or the task keeps
    before = served.copy()
    p = Partials(b"k" * 32, room=100)
    plan = MergePlan(abs, add_in_place, 10, 60.0)
    meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0)
    assert p.fold(plan, TaskRef("0123456789abcdef", 0), served, meta)
    assert p.fold(plan, TaskRef("0123456789abcdef", 1), np.ones(4), meta)
    assert served.tolist() == before.tolist()
    assert p.open["0123456789abcdef"].value.tolist() == (before + 1).tolist()
