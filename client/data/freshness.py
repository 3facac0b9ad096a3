"""Is a file still the one we opened? Stamps that notice a rewrite, and a local reader
that a file truncated under it cannot crash.

A worker keeps files open between tasks (with their trees' metadata) and caches the
branches it read; an analyst's skim may rewrite a file in place between two maps (same
path, new content). Before serving a chunk from an open file, :mod:`client.data.chunks`
compares the file's :class:`Stamp` now with the one taken when it was opened:

* a local file: ``fstat`` on a fresh descriptor (device, inode, size, mtime and ctime in
  ns: a write changes ctime even when mtime is set back, and opening the file makes NFS
  revalidate its attributes) and the first bytes of its ROOT header (end of file, free
  segments, streamer info and UUID), read with one ``pread``: a few microseconds;
* a ``root://`` file: the server's stat (id, size, mtime, ctime, as far as it reports
  them) and the header read through the open file, sent together: one round trip.

The stamp's :attr:`Stamp.version` also prefixes the file's entries in the worker's branch
cache, so a file rewritten with the same UUID (ROOT's ``UPDATE`` mode keeps it) never gets
the old numbers back from the cache either.

Local files are read with ``pread`` (:class:`PreadSource`), not memory-mapped: a
memory-mapped file that shrinks kills the reading process with SIGBUS, while a short
``pread`` is an ordinary error that names the file.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "a.root")
    >>> _ = open(path, "wb").write(b"root" + bytes(200))
    >>> before = local_stamp(path)
    >>> local_stamp(path) == before
    True
    >>> _ = open(path, "ab").write(b"more")     # any write changes the stamp
    >>> local_stamp(path) == before
    False
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import queue

import numpy
import uproot

from . import xrootd
from rhtc.errors import RhtcError

#: ROOT's file header up to and including the UUID (its large-file form is 75 bytes).
HEADER_BYTES = 100


@dataclasses.dataclass(frozen=True)
class Stamp:
    """What says that a file is (still) the file we opened: its identity as the file system
    or server reports it, and the first bytes of its ROOT header."""

    identity: tuple
    header: bytes

    @functools.cached_property
    def version(self) -> str:
        """A short token naming this version of the file (prefix of its branch-cache keys)."""
        return hashlib.blake2b(repr((self.identity, self.header)).encode(), digest_size=8).hexdigest()


def local_stamp(path: str) -> Stamp:
    """The :class:`Stamp` of a local file (raises OSError when it cannot be opened)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        header = os.pread(fd, HEADER_BYTES, 0)
    finally:
        os.close(fd)
    return Stamp((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), header)


def remote_stamp(url: str, source) -> Stamp | None:
    """The :class:`Stamp` of a ``root://`` file: the server's stat and the header read through
    ``source`` (the open file's uproot source). None when the server does not answer: the
    read that follows will then fail with the server's own error. A header read that fails
    raises its error at once: a stalled server costs one request timeout here, not one here
    and another in the read behind it."""
    stat_answer = xrootd.stat_later(url)        # one round trip: the stat overlaps the read
    header = bytes(source.chunk(0, HEADER_BYTES).raw_data)
    identity = stat_answer()
    return Stamp(identity, header) if identity is not None else None


def stamp(path: str, source=None) -> Stamp | None:
    """The stamp of ``path`` now: local, or ``root://`` through the open file's ``source``;
    None when it cannot tell (another protocol, a root:// file not open, no answer)."""
    if xrootd.is_remote(path):
        return remote_stamp(path, source) if source is not None else None
    return local_stamp(path) if "://" not in path else None


def unchanged(path: str, opened: Stamp | None, source) -> bool:
    """True when ``path`` is still the file whose stamp was ``opened`` (or we cannot tell);
    a local file removed or unreadable now counts as changed (reopening it says which); a
    ``root://`` server that fails to answer raises its error, as the read would."""
    if opened is None:
        return True
    if xrootd.is_remote(path):   # the server's own error (a timeout...) is the read's: raised
        now = remote_stamp(path, source)
    else:
        try:
            now = stamp(path, source)
        except OSError:
            return False
    return now is None or now == opened


class FileShrank(OSError, RhtcError):
    """A local file is shorter than when it was opened: it was truncated or rewritten."""


class PreadSource(uproot.source.chunk.Source):
    """uproot's source for a local file, read with ``os.pread`` from one descriptor in the
    calling thread (no memory map, no I/O threads). Bytes that existed when the file was
    opened and are gone now raise :class:`FileShrank` naming the file, never SIGBUS.

    (not run by the tests: a fragment; tests/scenarios/test_rewritten_files_are_never_read_stale.py runs it)
    >>> f = uproot.open(path, handler=PreadSource)     # doctest: +SKIP
    """

    _dtype = uproot.source.chunk.Chunk._dtype

    def __init__(self, file_path: str, **options):
        super().__init__()
        self._file_path = file_path
        self._open()

    def _open(self) -> None:
        self._fd = os.open(self._file_path, os.O_RDONLY)   # a missing file: uproot's own FileNotFoundError ([Errno 2])
        self._num_bytes = os.fstat(self._fd).st_size

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_fd", None)
        return state

    def __setstate__(self, state):
        self.__dict__ = state
        self._open()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._file_path!r} at 0x{id(self):012x}>"

    def _read(self, start: int, stop: int) -> uproot.source.chunk.Chunk:
        if self._fd is None:
            raise OSError(f"{self._file_path} is closed")
        data = os.pread(self._fd, stop - start, start)
        if len(data) < min(stop, self._num_bytes) - start:
            now = os.fstat(self._fd).st_size
            raise FileShrank(f"{self._file_path} is {now} bytes long, shorter than the {self._num_bytes} "
                             "it had when it was opened: it was truncated or rewritten")
        future = uproot.source.futures.TrivialFuture(numpy.frombuffer(data, dtype=self._dtype))
        return uproot.source.chunk.Chunk(self, start, stop, future)

    def chunk(self, start: int, stop: int) -> uproot.source.chunk.Chunk:
        self._num_requests += 1
        self._num_requested_chunks += 1
        self._num_requested_bytes += stop - start
        return self._read(start, stop)

    def chunks(self, ranges: list[tuple[int, int]], notifications: queue.Queue) -> list:
        self._num_requests += 1
        self._num_requested_chunks += len(ranges)
        self._num_requested_bytes += sum(stop - start for start, stop in ranges)
        out = []
        for start, stop in ranges:
            chunk = self._read(start, stop)
            notifications.put(chunk)
            out.append(chunk)
        return out

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self):
        return self

    def __exit__(self, exception_type, exception_value, traceback):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
