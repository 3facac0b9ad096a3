"""What a map does with an answer that is not its task's result: a worker's fault about
the task (:class:`~broker.messages.Fault`: the function went missing, a frame it refused,
a replayed copy, an expired map token), or a frame it cannot verify because a worker
holding another key took the task. Each function takes the map (``self``, a
:class:`~client.engine.maprun.MapRun`) and acts through its verbs.
"""
from __future__ import annotations

import logging

from ...broker import protocol
from ...broker.messages import ErrorKind, Fault, FaultKind
from ..errors import RemoteError
from .tasks import TaskState

log = logging.getLogger("rhtc.client")


def fault(self, index: int, fault: Fault) -> None:
    """A worker could not run the task (see :class:`~broker.messages.FaultKind`)."""
    note = self.tasks.note(index)
    if fault.kind is FaultKind.MISSING_FUNCTION and self.policy.retry_fault(note):
        self._fn_uploaded = False
        self.requeue([index])
        return
    name = ErrorKind.WORKER_REFUSED if fault.kind in (FaultKind.BAD_FRAME, FaultKind.REPLAYED) \
        else ErrorKind.WORKER_ERROR
    err = RemoteError(index, name, fault.message, worker=fault.worker or None,
                      argument=self.describe_argument(index))
    if fault.kind is FaultKind.BAD_FRAME:
        note.refusal = err             # signed with our key, the frame forged: a genuine
        self.tasks.move(index, TaskState.REFUSED)    # result may still come; wait for it
    elif fault.kind is FaultKind.REPLAYED:
        return                         # a replayed copy: the genuine task is still on its way
    elif fault.kind is FaultKind.EXPIRED:
        self.requeue([index])          # we are alive: sent again under a fresh token
    else:
        self.fail(index, err)


def answered_by_misfit(self, frame: bytes, err: Exception) -> None:
    """A frame for our map that we cannot verify: a worker holding another key took the
    task and sent back its refusal. The task is gone from the queues: send it again,
    into the queue of a worker that holds our key (if one is live)."""
    ref = protocol.frame_ref(frame)
    if ref is None or ref.map_id != self.map_id or not self.tasks.is_waiting(ref.index):
        log.warning("map %s: dropped a result that failed verification: %s", self.map_id, err)
        return
    if not self.workers:               # before the first tick: learn who holds which key
        self.observe(self.storage.worker_statuses(queue_depths=False))
    if self.misfits and self.good_workers():      # not the task's fault: no attempt counted
        log.info("map %s: task %d came back from a worker holding another key; sending it to a "
                 "worker that holds ours", self.map_id, ref.index)
        self.requeue([ref.index])
    elif not self._warned_unverified:
        self._warned_unverified = True
        log.warning("map %s: task %d (and maybe more) was answered by a worker holding another "
                    "key (%s); the audit will send them again", self.map_id, ref.index, err)
