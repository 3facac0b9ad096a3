"""The merge on the workers, as the wire sees it: what a map that reduces asks of its
workers (:class:`MergePlan`, sent as the map's function) and the payload of a *partial*,
one result frame (status :data:`~broker.protocol.MERGED`) that stands for several tasks.

A worker running a map whose function is a :class:`MergePlan` folds each OK result into
a running partial of that map (with the map's reduce function) instead of sending it,
and hands the partial in when it covers ``tasks`` tasks, is ``seconds`` old, when the
worker's queue runs dry, or as soon as its next task is another map's while the map's
backlog is empty (``lua/take.lua`` says which maps still have one). The tasks of a partial stay leased until it is handed in; the
broker accepts it only while every task it covers is still leased to that worker
(``lua/take.lua``), and the client only when none of them is counted yet. Errors always
travel alone, one frame per task.

The payload of a partial::

    count (uint32 BE) | count task indices (uint32 BE each) | metas length (uint32 BE)
    | JSON list of the tasks' ResultMeta dicts (in the order of the indices) | packed value

    >>> meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0)
    >>> indices, metas, packed = decode_partial(encode_partial([4, 9], [meta, meta], b"xyz"))
    >>> indices, metas[1].worker, packed
    ([4, 9], 'w1', b'xyz')
    >>> combine({"n": 1, "h": [1]}, {"n": 2})
    {'n': 3, 'h': [1]}
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Any, Callable, Sequence

from .resultmeta import ResultMeta, pack_meta, unpack_meta

_U32 = struct.Struct(">I")


def combine(a: Any, b: Any) -> Any:
    """``a + b``, recursing into dicts (keys of either side kept) and tuples: what
    ``reduce=True`` folds results with, on the client and on the workers."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = combine(out[k], v) if k in out else v
        return out
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(combine(x, y) for x, y in zip(a, b))
    try:
        return a + b
    except TypeError as err:
        raise TypeError(f"cannot combine a {type(a).__name__} with a {type(b).__name__} using +: "
                        f"{err}. Return numbers, numpy arrays, hist objects or dicts of them, or "
                        "pass reduce=<your function of two results>") from err


@dataclasses.dataclass(frozen=True)
class MergePlan:
    """A map's function when its workers merge: run ``fn``; fold OK results with
    ``reduce`` (None: :func:`combine`); hand a partial in after ``tasks`` tasks or
    ``seconds`` s. Callable as ``fn`` itself, so a worker that knows no merging runs it
    as a plain function and sends each result alone.

    >>> MergePlan(abs, None, 8, 5.0)(-3)
    3
    """

    fn: Callable
    reduce: Callable | None
    tasks: int
    seconds: float

    def __call__(self, arg):
        return self.fn(arg)

    def fold(self, partial: Any, value: Any) -> Any:
        return (self.reduce or combine)(partial, value)


def encode_partial(indices: Sequence[int], metas: Sequence[ResultMeta], packed_value: bytes) -> bytes:
    """The payload of a partial covering ``indices`` (one meta each, packed as a single
    result's: :mod:`broker.resultmeta`)."""
    raw = [pack_meta(m) for m in metas]
    return b"".join([_U32.pack(len(indices)), struct.pack(f">{len(indices)}I", *indices),
                     _U32.pack(len(raw)), struct.pack(f">{len(raw)}I", *map(len, raw)), *raw, packed_value])


def decode_partial(payload: bytes | memoryview) -> tuple[list[int], list[ResultMeta], bytes | memoryview]:
    """(indices, metas, packed value) of a verified partial's payload."""
    view = memoryview(payload)
    n = _U32.unpack_from(view)[0]
    indices = list(struct.unpack_from(f">{n}I", view, 4))
    at = 4 + 4 * n
    m = _U32.unpack_from(view, at)[0]
    sizes = struct.unpack_from(f">{m}I", view, at + 4)
    at += 4 + 4 * m
    metas = []
    for size in sizes:
        metas.append(unpack_meta(view[at:at + size]))
        at += size
    return indices, metas, payload[at:]
