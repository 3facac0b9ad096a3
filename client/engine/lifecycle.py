"""A map's life in Redis, as its state knows it: one named phase and the one table of
the moves between phases, beside whether the caller closed the map.

Phases (``Phase``), moved by the driver's writes (``Write``)::

    NEW       nothing of the map is in Redis (before its first write, or its refused
              start was taken back whole)
    SENT      its tasks and its function may be in Redis (written, or being written)
    REMOVED   cancelled: its queued tasks and its keys were removed; its end not signed yet
    ENDED     its end is signed (workers refuse its frames); its keys are kept (its lost
              runs are still to read, or the write that was to delete them failed)
    DROPPED   its end is signed and its keys are gone

The map's state (:class:`client.engine.state.MapState`) moves the phase, from the events
its driver (:class:`client.engine.maprun.MapRun`) reports (:class:`Sending`,
:class:`EndSigned`...) and from the instructions it gives (an ``Enqueue`` means tasks
are written); a move the table does not allow raises :class:`InvalidLifecycleMove`: the
end is never signed twice, keys are never removed before the map is closed or its end
signed, and nothing is sent once the map is closed or ended. The driver reads what it
may do from here (:attr:`Lifecycle.in_broker`, :attr:`Lifecycle.end_signed`...) and keeps
no flag of its own.

    >>> life = Lifecycle("m1")
    >>> life.sending(), life.end_signed(dropped=False), life.keys_dropped()
    (None, None, None)
    >>> life.phase, life.in_broker, life.end_signed_already
    (<Phase.DROPPED: 4>, True, True)
    >>> life.end_signed(dropped=False)
    Traceback (most recent call last):
    ...
    rhtc.client.engine.lifecycle.InvalidLifecycleMove: map m1: its end signed in phase dropped is not in the lifecycle table; its phases so far: new -> sent -> ended -> dropped
"""
from __future__ import annotations

import dataclasses
import enum

from .tasks import InvalidTransition


class InvalidLifecycleMove(InvalidTransition):
    """A map tried a move of its lifecycle that :data:`LIFECYCLE` does not allow: a bug in
    rhtc (please report it with the message, which lists the map's moves)."""


class Phase(enum.IntEnum):
    """Where a map stands in Redis (see the module docstring)."""

    NEW = 0
    SENT = 1
    REMOVED = 2
    ENDED = 3
    DROPPED = 4


N, S, RM, E, DR = Phase


class Write(enum.Enum):
    """What the driver wrote to Redis about the map (the moves of its phase)."""

    SEND = "tasks sent"
    TAKE_BACK = "its start taken back"
    REMOVE = "its queued tasks and keys removed"
    SIGN_END = "its end signed"
    SIGN_END_AND_DROP = "its end signed, its keys deleted in the same write"
    DROP = "its keys deleted"


W = Write

#: Every allowed move of a map's phase: (phase, write) -> (the next phase, why). Nothing
#: else changes it; a write from a phase not listed with it raises.
LIFECYCLE: dict[tuple[Phase, Write], tuple[Phase, str]] = {
    (N, W.SEND): (S, "its first tasks are written, its function with them"),
    (S, W.SEND): (S, "more tasks written (the next batch, a retry, a backup, the function again)"),
    (S, W.TAKE_BACK): (N, "its refused start was taken back: nothing of it is left in Redis"),
    (S, W.REMOVE): (RM, "cancelled (or closed unfinished): its queued tasks and keys removed"),
    (E, W.REMOVE): (DR, "cancelled after its end: its keys removed"),
    (DR, W.REMOVE): (DR, "cancelled after its keys went: nothing more to remove"),
    (S, W.SIGN_END): (E, "its end signed; its keys kept (lost runs to read, or the write failed)"),
    (S, W.SIGN_END_AND_DROP): (DR, "its end signed and its keys deleted in the same write"),
    (RM, W.SIGN_END): (DR, "its end signed after the cancel removed its keys"),
    (RM, W.SIGN_END_AND_DROP): (DR, "its end signed after the cancel removed its keys"),
    (E, W.DROP): (DR, "its keys deleted after its end was signed"),
}


@dataclasses.dataclass(slots=True)
class Sending:
    """The driver is about to write tasks of the map (its first ones: with the function)."""


@dataclasses.dataclass(slots=True)
class Unsent:
    """The map's refused start was taken back: nothing of it is left in Redis."""


@dataclasses.dataclass(slots=True)
class EndSigned:
    """The driver wrote the map's signed end (``dropped``: its keys went in the same
    write). Reported whether the write succeeded or not: it is never tried twice."""

    dropped: bool = False


@dataclasses.dataclass(slots=True)
class KeysDropped:
    """The driver deleted the map's keys after its end was signed."""


@dataclasses.dataclass(slots=True)
class Removed:
    """A cancel removed ``count`` queued tasks of the map, and its keys."""

    count: int = 0


@dataclasses.dataclass(slots=True)
class Close:
    """The caller is done with the map (its results read, or it gives up on it)."""


class Lifecycle:
    """The phase of one map, its moves so far, whether it is closed and how many queued
    tasks its cancel removed."""

    __slots__ = ("map_id", "phase", "closed", "removed", "_moves")

    def __init__(self, map_id: str):
        self.map_id = map_id
        self.phase = N
        self.closed = False
        self.removed = 0                  # queued tasks a cancel took out of the broker
        self._moves = [N]

    # -- what the driver may do --------------------------------------------------------
    @property
    def in_broker(self) -> bool:
        """Something of the map may be in Redis (its keys, its queued tasks, its end)."""
        return self.phase is not N

    @property
    def end_signed_already(self) -> bool:
        return self.phase >= E

    @property
    def may_sign_end(self) -> bool:
        """Its end is to be signed: something was sent and the end is not signed yet."""
        return self.phase in (S, RM)

    @property
    def may_drop_keys(self) -> bool:
        """Its keys are to be deleted: its end is signed and its keys are still there."""
        return self.phase is E

    # -- moves ----------------------------------------------------------------------------
    def _move(self, write: Write) -> None:
        to = LIFECYCLE.get((self.phase, write))
        if to is None:
            raise InvalidLifecycleMove(
                f"map {self.map_id}: {write.value} in phase {self.phase.name.lower()} is not in the lifecycle "
                f"table; its phases so far: {' -> '.join(p.name.lower() for p in self._moves)}"
                + ("; the map is closed" if self.closed else ""))
        if to[0] is not self.phase:
            self._moves.append(to[0])
        self.phase = to[0]

    def sending(self) -> None:
        """Tasks are about to be written: never once the map is closed."""
        if self.closed:
            raise InvalidLifecycleMove(f"map {self.map_id}: tasks sent after the map was closed "
                                       f"(phase {self.phase.name.lower()})")
        self._move(W.SEND)

    def unsent(self) -> None:
        self._move(W.TAKE_BACK)

    def end_signed(self, dropped: bool) -> None:
        self._move(W.SIGN_END_AND_DROP if dropped else W.SIGN_END)

    def keys_dropped(self) -> None:
        self._move(W.DROP)

    def removed_by_cancel(self, count: int) -> None:
        """A cancel (or a close with tasks unfinished) removed the map's queued tasks."""
        if not self.closed:
            raise InvalidLifecycleMove(f"map {self.map_id}: its keys removed before it was closed or cancelled")
        self._move(W.REMOVE)
        self.removed = count

    def close(self) -> None:
        self.closed = True

    def apply(self, event) -> None:
        """Move as the driver's write ``event`` (one of :data:`WRITES`) says."""
        kind = type(event)
        if kind is Sending:
            self.sending()
        elif kind is Unsent:
            self.unsent()
        elif kind is EndSigned:
            self.end_signed(event.dropped)
        elif kind is KeysDropped:
            self.keys_dropped()
        elif kind is Removed:
            self.removed_by_cancel(event.count)
        elif kind is Close:
            self.close()
        else:                              # pragma: no cover (a new write unhandled)
            raise TypeError(f"map {self.map_id}: {event!r} is no write of the map's lifecycle")


#: The driver's writes it reports to the map's state (:meth:`MapState.handle`).
WRITES = (Sending, Unsent, EndSigned, KeysDropped, Removed, Close)


def lifecycle_table() -> str:
    """The moves of a map's phase as a text table (for docs and ``help``).

    >>> print(lifecycle_table().splitlines()[1])
    new      tasks sent                                          sent     its first tasks are written, its function with them
    """
    rows = [f"{'from':<8} {'write':<51} {'to':<8} why"]
    rows += [f"{a.name.lower():<8} {w.value:<51} {b.name.lower():<8} {why}" for (a, w), (b, why) in LIFECYCLE.items()]
    return "\n".join(rows)
