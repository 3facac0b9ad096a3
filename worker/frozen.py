"""What the branch cache hands a task: arrays the task cannot change for anyone else.

A warm answer must be the cold answer. The worker's caches (RAM, the node's disk tier,
chunks served without opening their file, coffea's NanoEvents buffers) hand the same
arrays to every task that reads a chunk, so an in-place write (``x *= 2``, a correction
applied with ``np.multiply(x, k, out=x)``) would change what the next task reads. Every
tier therefore hands out **read-only** arrays that cannot be made writable again: not
with ``x.flags.writeable = True``, ``x.setflags(write=True)``, nor through ``x.base``,
``np.asarray`` of an awkward array, ``ak.to_numpy``, ``ak.flatten`` or an element of a
jagged ``library="np"`` branch.

numpy refuses ``flags.writeable = True`` only for an array that does not own its memory
and whose base cannot give a writable buffer; an array that owns its memory can always be
made writable again. So the cache keeps every value it is given (:func:`freeze`) in memory
that no array owns:

* numpy arrays: the bytes of the array (``bytes``, immutable), seen through a read-only
  ``np.frombuffer`` view; a task gets a view of that view (:func:`hand_out`);
* awkward arrays: a layout rebuilt over such views (``ak.to_buffers``/``ak.from_buffers``:
  offsets, contents, indexes, masks), the task gets a new ``ak.Array`` over it (its own
  wrapper: ``arr["field"] = ...`` changes only the task's);
* object arrays (jagged ``library="np"``): per-event arrays viewing one such buffer; a task
  gets a read-only view of its own copy of the array of references (the per-event arrays
  are the cache's; the copy, ``x.base``, is the task's: changing it changes no later read);
* what the node's disk tier reads back is already such a view (of the entry's bytes or
  its read-only memory map): it is kept as it is, without a copy.

The copy into bytes is made once, as a value enters the cache (the cold read, whose task
is handed views of it too: :mod:`client.data.chunks`), never on a warm read. For the five
dimuon branches of a 250k-event chunk (18 MB) it took 3 ms, 0.2x of the LZ4 cold read and
0.07x of a ZLIB one; a warm read's five wrappers take ~40 us, as before. Jagged
``library="np"`` branches are slow in uproot already (~0.1 s per branch of 250k events):
sealing them costs about as much again, once, and each read copies the references (~3 ms
per branch). The disk tier is fed in the background from the cache's bytes, which no task
can reach. A reader that keeps what it read (a ``Chunk.arrays`` call with ``cut=`` or
expressions, coffea building a chunk's events the first time) keeps its own arrays,
read-only by flag: a flip and a write there change that task's answer, no later one.

Out of scope, for every tier: writing memory through ``ctypes`` (or an ``np.ndarray``
constructed over a raw address), or reaching into the private attributes of the cache's
objects: that is no longer numpy's read-only contract but poking at the process.

A task that writes into one of them, or tries to make one writable, gets
:class:`rhtc.errors.ReadOnlyArrayError` (a ``ValueError``), which :func:`explain` builds from
numpy's bare message: it names the branch and the chunk and says how to copy
(``np.array(x)``, ``ak.copy(x)``, ``x.copy()``).

    >>> import numpy as np
    >>> stored = freeze(np.arange(4.0))
    >>> x = hand_out(stored)
    >>> x.flags.writeable, x is stored, x.flags.owndata
    (False, False, False)
    >>> try:
    ...     x *= 2
    ... except ValueError as err:
    ...     print(err)
    output array is read-only
    >>> x.flags.writeable = True
    Traceback (most recent call last):
    ...
    ValueError: cannot set WRITEABLE flag to True of this array
    >>> x.base.flags.writeable = True
    Traceback (most recent call last):
    ...
    ValueError: cannot set WRITEABLE flag to True of this array
"""
from __future__ import annotations

import operator
import types
from typing import Any, Iterable, Iterator

from rhtc.errors import ReadOnlyArrayError

#: numpy's messages for a write into a read-only array (ufunc ``out=``, assignment, sort...)
#: and for an attempt to make one writable again (``flags.writeable = True``, ``setflags``)
READ_ONLY_MESSAGES = ("read-only", "read only", "not writeable", "cannot set WRITEABLE flag")
#: kept as they are: nothing can change them
IMMUTABLE = (bytes, str, int, float, complex, bool, type(None))


def freeze(value: Any) -> Any:
    """What the cache keeps for ``value``: the same values in memory that no array owns
    (see the module), or ``value`` itself when it is so already (the disk tier's arrays,
    immutables); None for a kind of value the cache cannot make read-only (not kept).
    ``value``'s own buffers are made read-only too (an object array's, not its elements'),
    so its holder gets the same error as the tasks served from the cache.

    >>> import awkward as ak, numpy as np
    >>> kept = freeze(ak.Array([[1.0, 2.0], [], [3.0]]))
    >>> all(sealed(b) for b in buffers(kept)), kept.tolist()
    (True, [[1.0, 2.0], [], [3.0]])
    >>> freeze(b"bytes"), freeze([1, 2])
    (b'bytes', None)
    """
    for b in buffers(value):
        b.flags.writeable = False
    try:
        if _is_numpy(value):
            return _seal_objects(value) if value.dtype == object else _seal_array(value)
        if _is_awkward(value):
            return _seal_awkward(value)
    except (TypeError, ValueError):    # an exotic dtype or layout (not a backend's buffers)
        return None
    return value if isinstance(value, IMMUTABLE) else None


def sealed(array: Any) -> bool:
    """True when nothing reachable from the numpy ``array`` (it, its ``base``s, their
    buffers) can be made writable: it does not own its memory, and its bases end in an
    immutable or read-only buffer (``bytes``, a read-only ``mmap``).

    >>> import numpy as np
    >>> a = np.arange(3.0); a.flags.writeable = False
    >>> sealed(a), sealed(a[1:]), sealed(np.frombuffer(a.tobytes())[1:])
    (False, False, True)
    """
    obj = array
    for _ in range(32):
        if _is_numpy(obj):
            if obj.flags.owndata or obj.flags.writeable or obj.dtype == object:
                return False
            obj = obj.base
        elif isinstance(obj, memoryview):
            if not obj.readonly:
                return False
            obj = obj.obj
        elif obj is None:
            return False               # memory nobody owns: numpy lets such an array be flipped
        else:
            try:
                with memoryview(obj) as view:
                    return view.readonly
            except TypeError:
                return False
    return False


def _seal_array(array: Any) -> Any:
    """A numeric numpy array kept as a view of its own bytes (one copy), unless sealed."""
    if sealed(array):
        return array
    return _view_of(array.tobytes(), array.dtype, array.shape)


def _view_of(data: bytes, dtype: Any, shape: tuple) -> Any:
    import numpy as np
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _seal_objects(array: Any) -> Any:
    """An object array (jagged ``library="np"``): a new one, read-only, whose numpy
    elements are views of one buffer of bytes (those of one dtype, as uproot makes them)
    or sealed each; other elements are kept as they are."""
    import numpy as np
    items = array.reshape(-1).tolist()
    if set(map(type, items)) == {np.ndarray} and len(set(map(operator.attrgetter("dtype"), items))) == 1 \
            and items[0].dtype != object and set(map(operator.attrgetter("ndim"), items)) == {1}:
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        stops = np.cumsum(lengths)
        content = _seal_array(np.concatenate(items))
        elements = [content[a:b] for a, b in zip((stops - lengths).tolist(), stops.tolist())]
    else:
        elements = [_seal_element(e) for e in items]
    out = np.fromiter(elements, dtype=object, count=len(elements)).reshape(array.shape)
    out.flags.writeable = False
    return out


def _seal_element(element: Any) -> Any:
    if _is_numpy(element):
        return _seal_objects(element) if element.dtype == object else _seal_array(element)
    return element


def _seal_awkward(array: Any) -> Any:
    """An awkward array over a layout whose every buffer is sealed (rebuilt from its
    buffers when one is not); None when the rebuilt one is not (an exotic layout)."""
    if all(sealed(b) for b in buffers(array)):
        return array
    import awkward as ak
    form, length, container = ak.to_buffers(array)
    layout = ak.from_buffers(form, length, {k: _seal_array(b) for k, b in container.items()},
                             highlevel=False)
    out = _wrap(layout, array)
    return out if all(sealed(b) for b in buffers(out)) else None


def _wrap(layout: Any, like: Any) -> Any:
    """A new ``ak.Array`` over ``layout`` with the behavior and attrs of ``like``."""
    import awkward as ak
    attrs = getattr(like, "_attrs", None)          # awkward >= 2.5; older ones have none
    if attrs:
        return ak.Array(layout, behavior=like.behavior, attrs=attrs)
    return ak.Array(layout, behavior=like.behavior)


def hand_out(value: Any) -> Any:
    """What a task gets for a cached ``value``: a read-only view of a numpy array (of its
    own copy of an object array's references), a new ``ak.Array`` over an awkward array's
    layout (the task may change its own wrapper, not the cache's), anything else as it is
    (bytes and other immutables). Views and wrappers: no data is copied.

    >>> import awkward as ak
    >>> cached = freeze(ak.Array([[1, 2], [3]]))
    >>> mine = hand_out(cached)
    >>> mine is cached, mine.layout is cached.layout
    (False, True)
    """
    if _is_numpy(value):
        if value.dtype == object:          # the references are copied, not the events' arrays
            value = value.copy()
            value.flags.writeable = False
        return value.view()
    if _is_awkward(value):
        return _wrap(value.layout, value)
    return value


def buffers(value: Any) -> Iterator[Any]:
    """The numpy buffers a cached value is made of (an awkward array's, walked through its
    layout without copying; a numpy array itself)."""
    if _is_numpy(value):
        yield value
    elif _is_awkward(value):
        yield from _layout_buffers(value.layout)


def _layout_buffers(layout: Any) -> Iterator[Any]:
    for name in ("offsets", "starts", "stops", "index", "tags", "mask"):
        index = getattr(layout, name, None)
        data = getattr(index, "data", None)
        if _is_numpy(data):
            yield data
    data = getattr(layout, "data", None) if getattr(layout, "is_numpy", False) else None
    if _is_numpy(data):
        yield data
    for child in getattr(layout, "contents", None) or ([layout.content] if hasattr(layout, "content") else []):
        yield from _layout_buffers(child)


def _is_numpy(value: Any) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _is_awkward(value: Any) -> bool:
    return type(value).__name__ == "Array" and type(value).__module__.startswith("awkward")


# -- the error a task gets when it writes into one -------------------------------------------

def explain(err: BaseException, handed: Iterable[tuple[str, Any]]) -> BaseException:
    """``err`` itself, or a :class:`ReadOnlyArrayError` caused by it when ``err`` (or its
    cause) is numpy refusing to write into a read-only array, or to make one writable
    again (``x.flags.writeable = True``), and the task was handed
    cached arrays (``handed``: (branch, cached value) pairs). The branch is found by
    matching the arrays in the failing frames to the cached buffers' memory; failing
    that, every branch the task was handed is named.

    >>> import numpy as np
    >>> cached = freeze(np.zeros(3))
    >>> def task():
    ...     x = hand_out(cached)
    ...     x += 1
    >>> try:
    ...     task()
    ... except ValueError as e:
    ...     print(explain(e, [("Muon_pt of chunk u1:Events:0-3", cached)]))  # doctest: +ELLIPSIS
    the task wrote into branch Muon_pt of chunk u1:Events:0-3 (output array is read-only): ...
    >>> def flips():
    ...     x = hand_out(cached)
    ...     x.flags.writeable = True
    >>> try:
    ...     flips()
    ... except ValueError as e:
    ...     print(explain(e, [("Muon_pt of chunk u1:Events:0-3", cached)]))  # doctest: +ELLIPSIS
    the task tried to make branch Muon_pt of chunk u1:Events:0-3 writable (cannot set WRITEABLE flag ...): ...
    """
    try:
        return _explain(err, list(handed))
    except Exception:                   # explaining must never hide the task's own error
        return err


def _explain(err: BaseException, handed: list[tuple[str, Any]]) -> BaseException:
    cause = _read_only_error(err)
    if cause is None or not handed or isinstance(err, ReadOnlyArrayError):
        return err
    written = _written(cause, handed)
    names = sorted({name for name, _ in handed})
    what = f"branch {written or names[0]}" if written or len(names) == 1 else \
        "one of the branches " + ", ".join(names)
    did = f"tried to make {what} writable" if "WRITEABLE" in str(cause) else f"wrote into {what}"
    new = ReadOnlyArrayError(
        f"the task {did} ({cause}): arrays served by the worker's cache are read-only on "
        "every tier and cannot be made writable again, so that no task changes what a later "
        "one reads. Copy before changing in place: x = np.array(x) or x = x.copy() (numpy), "
        "x = ak.copy(x) (awkward), or write x = x * k instead of x *= k")
    new.__cause__ = err
    new.__traceback__ = err.__traceback__
    return new


def _read_only_error(err: BaseException) -> BaseException | None:
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ValueError) and any(m in str(err) for m in READ_ONLY_MESSAGES):
            return err
        err = err.__cause__ or err.__context__
    return None


def _written(err: BaseException, handed: list[tuple[str, Any]]) -> str | None:
    """The branch whose buffers a read-only array in the failing frames' locals points into."""
    ranges = [(start, stop, name) for name, value in handed for start, stop in _ranges(value)]
    tb: types.TracebackType | None = err.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):                 # the innermost frame first
        for local in list(frame.f_locals.values()):
            for start, stop in _ranges(local):
                for lo, hi, name in ranges:
                    if lo <= start < hi or (start == lo and stop == hi):
                        return name
    return None


def _ranges(value: Any) -> list[tuple[int, int]]:
    out = []
    try:
        for b in buffers(value):
            if b.flags.writeable or b.dtype == object:
                continue
            start = b.__array_interface__["data"][0]
            out.append((start, start + max(b.nbytes, 1)))
    except Exception:                   # an exotic array: no range, the fallback names them all
        pass
    return out
