"""When a task runs again: the one place that decides.

* the function raised: rerun up to ``retries`` times, only for ``retry_on`` types if given;
* a fault (the function blob went missing, a worker could not verify the frame): rerun up
  to ``max_attempts`` times (:class:`~broker.config.Settings`, ``RHTC_MAX_ATTEMPTS``);
* the worker died while running it: the broker's reaper requeues it, up to the same
  ``max_attempts`` (``reap.lua``), then hands it back as dead (``WorkerLost``).

Example::

    >>> from rhtc.client.tasks import TaskNote
    >>> p = RetryPolicy(retries=1, retry_on=("OSError",))
    >>> note = TaskNote()
    >>> p.retry_user_error(note, {"type": "OSError"}), p.retry_user_error(note, {"type": "OSError"})
    (True, False)
    >>> p.retry_user_error(TaskNote(), {"type": "ValueError"})
    False
"""
from __future__ import annotations

import dataclasses

from rhtc.broker import protocol
from rhtc.client.tasks import TaskNote


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How many times a task may run again, and after what."""

    retries: int = 0                       # reruns after the user's function raised
    retry_on: tuple | None = None          # ... only for these types (or type names)
    max_attempts: int = 3                  # runs in all after faults (Settings.max_attempts)

    def retry_user_error(self, note: TaskNote, info: dict) -> bool:
        """Whether to rerun a task whose function raised (counts the attempt if so)."""
        if note.user_attempts >= self.retries or not self._matches(info):
            return False
        note.user_attempts += 1
        return True

    def retry_fault(self, note: TaskNote) -> bool:
        """Whether to rerun a task a worker could not run (counts the attempt if so)."""
        if note.system_attempts + 1 >= self.max_attempts:
            return False
        note.system_attempts += 1
        return True

    def _matches(self, info: dict) -> bool:
        if not self.retry_on:
            return True
        names = {t if isinstance(t, str) else t.__name__ for t in self.retry_on}
        if info.get("type") in names:
            return True
        exc = self.exception_of(info)
        types = tuple(t for t in self.retry_on if isinstance(t, type))
        return bool(exc is not None and types and isinstance(exc, types))

    @staticmethod
    def exception_of(info: dict) -> BaseException | None:
        """The remote exception object, if it unpickles here."""
        try:
            return protocol.loads_plain(info["exception"]) if info.get("exception") else None
        except Exception:
            return None
