"""What a task hands back: its value packed for the wire, or, when the value or the
user's exception cannot travel, an error result saying why. Nothing the user's code
returns or raises may take the task process down or wedge the worker's connection.

    >>> limit = result_limit(64 * 2**20, BulkLimits())
    >>> limit.nbytes == 64 * 2**20, limit.setting
    (True, 'RHTC_MAX_RESULT_BYTES')
"""
from __future__ import annotations

import dataclasses
import traceback
from typing import Callable, Sequence

import cloudpickle

from ..broker.wire import messages, protocol
from ..broker.wire.config import mib
from ..broker.leases import BulkLimits
from ..broker.wire.resultmeta import result_parts

#: room left in one Redis command for the frame's header, the meta and the other arguments
COMMAND_MARGIN = 64 * 1024
#: what fits in one command whatever the broker's settings (Redis allows no
#: proto-max-bulk-len or client-query-buffer-limit below 1 MiB): a result this small
#: never makes the worker ask the broker for its limits
ALWAYS_FITS = 1024 * 1024 - COMMAND_MARGIN
#: a result over ALWAYS_FITS that the broker refused this often in a row becomes an error
REFUSALS = 3


@dataclasses.dataclass(frozen=True)
class ResultLimit:
    """The largest packed result a worker may hand in, and the setting that makes it so."""

    nbytes: int
    setting: str        # the name the error message gives the limit
    advice: str         # what the user may do besides returning less


def result_limit(max_result_bytes: int, broker: BulkLimits) -> ResultLimit:
    """The binding limit on one result: ours (``RHTC_MAX_RESULT_BYTES``) or the broker's
    (``proto-max-bulk-len``, ``client-query-buffer-limit``), whichever is lower."""
    setting, name = broker.one_value
    theirs = setting - COMMAND_MARGIN
    where = "" if broker.known else " (Redis' default: the broker did not let us read it)"
    if max_result_bytes <= theirs:
        return ResultLimit(max_result_bytes, "RHTC_MAX_RESULT_BYTES",
                           f"or raise RHTC_MAX_RESULT_BYTES on the workers (the broker accepts less than "
                           f"its {name} of {mib(setting)}{where})")
    return ResultLimit(theirs, f"the broker's {name} of {mib(setting)}{where}",
                       f"or raise {name} on the broker (CONFIG SET {name} ...)")


def pack_result(status: int, value, meta: messages.ResultMeta, arg, max_result_bytes: int,
                broker_limits: Callable[[], BulkLimits],
                dumps: Callable[[object], bytes | list[bytes]] = protocol.dumps_parts,
                ) -> tuple[int, bytes | list[bytes]]:
    """(status, payload or its parts: :func:`broker.wire.protocol.sign`); a result that cannot
    travel becomes an error result. The broker's limits are asked for
    (``broker_limits()``) only for a result over 1 MiB. ``dumps`` packs the value
    (:func:`broker.wire.protocol.dumps_parts`, or bytes)."""
    try:
        packed = protocol.parts_of(dumps(value))
    except BaseException as err:   # noqa: B036 - a value's __reduce__ may raise anything
        why = safe_text(lambda e: f"{type(e).__name__}: {e}", err, type(err).__name__)
        msg = (f"the function returned a {type(value).__name__} that cannot be pickled "
               f"({why}); return plain numbers, numpy arrays, hist objects or dicts of them")
        return protocol.USER_ERROR, messages.encode_result(
            protocol.dumps(task_error(messages.ErrorKind.UNPICKLABLE_RESULT, msg, "", arg)), meta)
    limit, size = None, sum(map(len, packed))
    if size > min(max_result_bytes, ALWAYS_FITS):
        limit = result_limit(max_result_bytes, broker_limits())
    if limit is not None and size > limit.nbytes:
        msg = (f"the result is {mib(size)} compressed, over the limit of {mib(limit.nbytes)} "
               f"({limit.setting}): reduce on the worker (histograms, sums) instead of returning "
               f"per-event data, {limit.advice}")
        return protocol.USER_ERROR, messages.encode_result(
            protocol.dumps(task_error(messages.ErrorKind.RESULT_TOO_LARGE, msg, "", arg)), meta)
    return status, result_parts(packed, meta)


def refused_by_broker(key: bytes, frame: bytes, err: BaseException) -> bytes:
    """The ``ResultTooLarge`` error frame that replaces a signed result ``frame`` the
    broker keeps refusing (``err``), with the original run's meta."""
    map_id, index, status, payload = protocol.unpack_result(key, frame)
    meta = messages.decode_result(payload)[0] if status != protocol.SYSTEM_ERROR else \
        messages.ResultMeta("?", "?", 0, 0.0, 0.0)
    why = safe_text(lambda e: f"{type(e).__name__}: {e}", err, type(err).__name__)
    msg = (f"the broker refused the {mib(len(frame))} result {REFUSALS} times ({why}), although it "
           "answers: it is over what one command may carry (the broker's proto-max-bulk-len or "
           "client-query-buffer-limit, which this worker could not read). Reduce on the worker "
           "(histograms, sums) instead of returning per-event data, or raise those limits on the broker")
    info = task_error(messages.ErrorKind.RESULT_TOO_LARGE, msg, "", NO_ARGUMENT)
    return protocol.pack_result(key, map_id, index, protocol.USER_ERROR,
                                messages.encode_result(protocol.dumps(info), meta))


def batches_within(results: Sequence[tuple[str, bytes, bytes]], budget: int) -> list[list]:
    """Split results to hand in into groups of at most ``budget`` bytes each (a group
    holds at least one), so that no command exceeds the broker's query buffer."""
    groups: list[list] = [[]]
    size = 0
    for item in results:
        n = len(item[2]) + len(item[1]) + len(item[0])
        if groups[-1] and size + n > budget:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += n
    return groups


NO_ARGUMENT = object()       # an error about no particular argument (a result the broker refused)


def task_error(kind: str, message: str, tb: str, arg, exc: bytes | None = None) -> dict:
    """The wire form of a :class:`~broker.wire.messages.TaskError` about ``arg``'s task."""
    arg_text = "" if arg is NO_ARGUMENT else safe_text(repr, arg, f"<{type(arg).__name__} (its repr() raised)>")
    return messages.TaskError(str(kind), message, tb, arg_text[:500], exc).to_wire()


def safe_text(show, obj, fallback: str) -> str:
    """``show(obj)`` as a plain str, or ``fallback`` if it raises (anything at all) or
    returns no str: user objects may do anything in ``__str__``/``__repr__``."""
    try:
        text = show(obj)
        return str.__str__(text) if isinstance(text, str) else fallback
    except BaseException:   # noqa: B036 - a user's __str__ may raise SystemExit, anything
        return fallback


def describe_error(err: BaseException, arg) -> dict:  # a TaskError's wire form
    """What travels back about the user's exception: its type name, message, traceback
    text and (if it pickles and loads back) the exception itself. Whatever of it the
    exception refuses (a raising ``__str__``, ``__reduce__`` or args that do not pickle)
    is replaced by a note, never raised: the task process must outlive any exception."""
    kind = safe_text(lambda e: type(e).__name__, err, "BaseException")
    message = safe_text(str, err, f"<the {kind}'s message could not be formatted: its __str__ raised>")
    try:
        tb = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    except BaseException:   # noqa: B036
        tb = safe_text(lambda e: "".join(traceback.format_tb(e.__traceback__)), err, "")
        tb = f"Traceback (most recent call last):\n{tb}{kind}: {message}\n"
    try:
        exc = cloudpickle.dumps(err)
        cloudpickle.loads(exc)      # a pickle that does not load back is of no use to the client
    except BaseException:   # noqa: B036 - __reduce__ may raise anything
        exc = None
        tb += f"(the {kind} itself could not be pickled: its type name, message and this traceback came back)\n"
    return task_error(kind, message, tb, arg, exc)


def events_of(arg) -> int | None:
    """How many events a task's argument (a chunk) holds, for its result's meta; None if it does not say."""
    try:
        n = getattr(arg, "num_entries", None) if arg is not None else None
        return int(n) if isinstance(n, int) else None
    except BaseException:   # noqa: B036 - a user's argument may raise anything from __getattr__
        return None
