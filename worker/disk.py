"""The node's disk tier: the branch cache's entries kept on node-local disk, shared by
every worker of the node that points at the same directory, so that a worker replaced
on the node (walltime, eviction, the keeper's replacement, the next morning's pool)
comes back warm.

The store is :mod:`diskcache` (SQLite index + one file per large value): it is made for
several processes sharing one directory, publishes an entry atomically (the index row is
committed only after the value's file is written, so a reader never sees a half-written
entry; a writer killed mid-write leaves an orphan file that diskcache ignores), caps the
directory in bytes and evicts across all its users. We add what it does not do:

* **a private directory** (:mod:`worker.tierdir`): owned by the worker's user, writable by
  nobody else (its group included), under parents nobody else can replace; otherwise
  :class:`DiskTierRefused` and the worker runs on its RAM cache. Every folder and file the
  tier makes is 0700/0600 whatever the umask (:mod:`worker.tierfiles`);
* **odd entries** (a named pipe, a link, a folder, a device or another user's file where
  an entry's file should be) are never opened in a way that can block, nor read: the
  entry is counted in :attr:`DiskTier.refused`, logged by name, and the chunk is read
  from its input file (:func:`worker.tierfiles.open_entry`);
* a **checksum** and length over every entry (a file truncated or corrupted after a node
  crash is dropped and re-read from the input file: costs a read, never an error or a
  wrong value), and a **tag** under the tier's secret over the entry and its key: an
  entry not written by the analyst's workers, or moved to another key, is refused
  (counted in :attr:`DiskTier.refused`), never served;
* **no pickle**: arrays are stored as their raw buffers (numpy) or awkward's
  ``to_buffers``, behind a small JSON header (:mod:`worker.entries`: raw, or LZ4 where it
  shrinks a buffer to a quarter; a disk hit must cost much less than decompressing the
  ROOT basket again); diskcache is given a :func:`bytes_only_disk` that stores and
  returns bytes and str keys only: an index row of any other kind (a pickle planted in
  the SQLite index) is refused, never decoded;
* **free space**: nothing is written when the disk's free space would fall under
  ``min_free`` (the cap is not the only limit: other jobs share the disk);
* keys are the RAM cache's: the file's version stamp, then the chunk (file UUID, tree,
  entry range), the branch and uproot's library (:func:`worker.cache.chunk_key`), so a
  changed input file is never served stale, and a replaced worker finds a chunk's
  branches without opening the file (:mod:`client.data.cachedchunks`) and has RAM entries
  again under the same keys.

Eviction is "least recently stored": a read never writes to the index, so the workers of
a node never queue for SQLite's write lock to *read*.

    >>> import tempfile, numpy as np
    >>> d = DiskTier(tempfile.mkdtemp(), size_limit=10_000_000)
    >>> d.put("v1|uuid:Events:Muon_pt:0-10", np.arange(10, dtype=np.float32))
    True
    >>> d.get("v1|uuid:Events:Muon_pt:0-10")[:3]
    array([0., 1., 2.], dtype=float32)
    >>> d.get("v2|uuid:Events:Muon_pt:0-10") is None
    True
    >>> d.close()
"""
from __future__ import annotations

import functools
import logging
import mmap
import os
import queue
import re
import shutil
import threading
import time
from typing import Any

from .entries import NotOurs, Seal, decode, encode  # noqa: F401  (the entry format; tests read it here)
from .tierdir import DiskTierRefused, private_contents, private_directory, tier_id, tier_secret
from .tierfiles import OddEntry, open_entry, write_entry

log = logging.getLogger("rhtc.worker")

MIN_FREE = 2 * 1024 ** 3                 # never fill the disk: leave this much free (bytes)
MAP_FROM = 1 << 20                       # entries at least this large are memory-mapped, not read
WRITE_QUEUE = 256                        # entries waiting for the background writer, at most


class DiskTier:
    """A node-local, size-capped, multi-process store of branch arrays (see the module)."""

    def __init__(self, directory: str | os.PathLike, size_limit: int, min_free: int = MIN_FREE):
        import diskcache
        self.directory = private_directory(directory)      # DiskTierRefused when not the analyst's own
        self.size_limit, self.min_free = int(size_limit), int(min_free)
        self.tier, self._seal = tier_id(self.directory), Seal(tier_secret(self.directory))
        private_contents(self.directory)                   # its index 0600 before SQLite makes it
        self._store = diskcache.Cache(self.directory, disk=bytes_only_disk(), size_limit=self.size_limit,
                                      eviction_policy="least-recently-stored", timeout=5,
                                      cull_limit=20)
        self.hits = self.misses = self.dropped = self.written = self.skipped = 0
        self.refused = 0              # entries not written by this tier's workers, moved to another key,
                                      # or not a regular file of ours (a named pipe, a link...)
        self._volume, self._volume_at = 0, -1.0
        self._pending: queue.Queue = queue.Queue(maxsize=WRITE_QUEUE)
        self._writer: threading.Thread | None = None

    # -- reading -------------------------------------------------------------------------
    def get(self, key: str) -> Any | None:
        """The array stored under ``key``; None when absent, corrupt, unreadable or not
        authentic (such an entry is deleted: the caller reads the input file instead)."""
        try:
            raw = self._store.get(key, default=None, read=True, retry=True)
            if raw is not None and not isinstance(raw, (bytes, Refused)):
                raw = mapped(raw)              # an entry in a file of its own (not a small one)
        except Exception as err:           # a broken index, a disk error: a miss, said once
            self._say(f"cannot read the disk cache {self.directory}: {type(err).__name__}: {err}")
            raw = None
        if raw is None:
            self.misses += 1
            return None
        try:
            value = raw if isinstance(raw, Refused) else decode(raw, key, self._seal)
        except NotOurs:
            value = Refused("its tag is wrong for its key: written without the tier's secret, or moved "
                            "from another key")
        if value is None or isinstance(value, Refused):
            if value is None:
                self.dropped += 1
            else:
                self.refused += 1
                self._say(f"the disk cache {self.directory}: the entry under {key!r} was refused ({self.refused} "
                          f"so far): {value.why}")
            self.misses += 1
            self.discard(key)
            return None
        self.hits += 1
        return value

    def has(self, key: str) -> bool:
        """True when an entry is stored under ``key`` (its value is neither read nor checked)."""
        try:
            return key in self._store
        except Exception:
            return False

    # -- writing -------------------------------------------------------------------------
    def put(self, key: str, value: Any) -> bool:
        """Store ``value`` (numpy or awkward); False when it cannot be stored (a kind of
        value we don't keep, larger than a tenth of the cap, or too little free disk)."""
        raw = encode(value, key, self._seal)
        if raw is None or len(raw) > self.size_limit // 10 or not self._room(len(raw)):
            self.skipped += 1
            return False
        try:
            self._store.set(key, raw, retry=True)
        except Exception as err:
            self._say(f"cannot write the disk cache {self.directory}: {type(err).__name__}: {err}")
            return False
        self.written += 1
        return True

    def put_later(self, key: str, value: Any) -> None:
        """:meth:`put` in the background (compressing and writing while the task goes on);
        dropped when the writer is :data:`WRITE_QUEUE` entries behind: a cache may miss."""
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="rhtc-disk-writer", daemon=True)
            self._writer.start()
        try:
            self._pending.put_nowait((key, value))
        except queue.Full:
            self.skipped += 1

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until what :meth:`put_later` was given is written, at most ``timeout`` s
        (tests; a stopping worker, whose writer thread dies with it); True when it all is."""
        if self._writer is None:
            return True
        deadline = time.monotonic() + timeout
        with self._pending.all_tasks_done:
            while self._pending.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._pending.all_tasks_done.wait(left)
        return True

    def _write_loop(self) -> None:
        while True:
            key, value = self._pending.get()
            try:
                self.put(key, value)
            except Exception as err:           # never let the writer die
                self._say(f"cannot write the disk cache {self.directory}: {type(err).__name__}: {err}")
            finally:
                self._pending.task_done()

    def discard(self, key: str) -> None:
        try:
            self._store.delete(key, retry=True)
        except Exception:
            pass

    def _room(self, n: int) -> bool:
        try:
            free = shutil.disk_usage(self.directory).free
        except OSError:
            return False
        return free - n > self.min_free

    # -- about ---------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes the directory's entries take (all the node's workers together)."""
        now = time.monotonic()
        if now - self._volume_at > 1.0:           # one query a second at most
            try:
                self._volume, self._volume_at = int(self._store.volume()), now
            except Exception:
                pass
        return self._volume

    def __len__(self) -> int:
        try:
            return len(self._store)
        except Exception:
            return 0

    def close(self) -> None:
        self._store.close()

    _said: set = set()

    def _say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            log.warning("%s (the worker reads the input files instead)", message)


#: how long a stopping task process waits for its disk tier's pending writes (s)
DISK_FLUSH = 10.0


def finish_writes(disk: "DiskTier | None", worker: str) -> None:
    """Before a task process exits: write what its disk tier still has pending (its writer
    thread dies with the process), at most :data:`DISK_FLUSH` s."""
    if disk is not None and not disk.flush(DISK_FLUSH):
        log.warning("worker %s: stopped with chunks not yet written to the disk tier", worker)


def mapped(fh) -> mmap.mmap | bytes:
    """The bytes of an entry's file (``fh``, closed here), memory-mapped: its arrays are
    served from the page cache, without a copy into the process (a copy faulted fresh
    pages in at 1 GB/s: half a disk hit), and the node's workers share one copy. A
    mapped file that shrank would kill the reader (SIGBUS), but entry files are written
    once by diskcache under a new name and only ever unlinked (eviction, replacement), and
    an unlinked file stays readable while mapped; its blocks are freed when the worker's
    RAM cache lets it go (so the tier may pass its cap by what RAM caches hold). Files under
    :data:`MAP_FROM` bytes are read (a process may hold ~65k maps), and so are files that
    a file system cannot map.

    >>> import tempfile
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(b"e" * MAP_FROM); f.flush(); m = mapped(open(f.fileno(), "rb", closefd=False))
    >>> type(m).__name__, len(m)
    ('mmap', 1048576)
    """
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size < MAP_FROM:
            return fh.read()
        try:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):           # a file system that cannot map it: read it
            return fh.read()


class Refused:
    """What :func:`bytes_only_disk` hands back instead of an entry it will not read: why."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"Refused({self.why!r})"


#: what :func:`bytes_only_disk` hands back for an index row that is not one of ours
REFUSED = Refused("its index row is neither raw bytes nor an entry's file in the tier (a pickle?)")
#: the names diskcache gives the files of large entries (``ab/cd/<28 hex>.val``, in the tier)
ENTRY_FILE = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{28}\.val")


@functools.cache
def bytes_only_disk() -> type:
    """A ``diskcache.Disk`` that stores bytes under str keys and never decodes anything
    else: diskcache's own ``Disk`` unpickles a value of mode PICKLE and a key stored
    pickled, so a row planted in the SQLite index would run code in the worker. Here a
    row that is not raw bytes or a file of bytes in the tier (:data:`ENTRY_FILE`) reads as
    :data:`REFUSED`; a key that is not a raw str reads as None, and a non-str key is never
    written (so never matched: ``get`` looks up ``(key, raw=1)``).

    Its files are its own too: written 0600 in folders 0700 whatever the umask
    (diskcache's would be ``0666/0777 & ~umask``), and opened without following a link nor
    waiting on a named pipe, then read only when they are regular files of ours that
    nobody else can write (:func:`worker.tierfiles.open_entry`); another thing there
    reads as a :class:`Refused` that says what it is.

    >>> import tempfile, diskcache
    >>> c = diskcache.Cache(tempfile.mkdtemp(), disk=bytes_only_disk())
    >>> c.set("k", b"value"), c.get("k")
    (True, b'value')
    >>> _ = c._sql("UPDATE Cache SET mode = 4"); c.get("k") is REFUSED          # a PICKLE row
    True
    """
    import sqlite3

    import diskcache
    from diskcache.core import MODE_BINARY, MODE_RAW, UNKNOWN

    class BytesOnlyDisk(diskcache.Disk):
        def put(self, key):
            if type(key) is not str:
                raise TypeError(f"the disk tier's keys are str, not {type(key).__name__}")
            return key, True

        def get(self, key, raw):                    # keys read back (iteration): never unpickled
            return key if raw and type(key) is str else None

        def store(self, value, read, key=UNKNOWN):
            if type(value) is not bytes:
                raise TypeError(f"the disk tier stores bytes, not {type(value).__name__}")
            if len(value) < self.min_file_size:
                return 0, MODE_RAW, None, sqlite3.Binary(value)
            filename, _ = self.filename(key, value)
            for attempt in range(1, 11):           # as diskcache: a folder may be evicted meanwhile
                try:
                    return write_entry(self._directory, filename, value), MODE_BINARY, filename, None
                except OSError:
                    if attempt == 10:
                        raise

        def fetch(self, mode, filename, value, read):
            if mode == MODE_RAW and type(value) is bytes:
                return value
            if mode == MODE_BINARY and value is None and type(filename) is str and ENTRY_FILE.fullmatch(filename):
                try:
                    fd = open_entry(self._directory, filename)   # FileNotFoundError: evicted, a miss
                except OddEntry as odd:
                    return Refused(str(odd))
                fh = os.fdopen(fd, "rb")
                if read:
                    return fh
                with fh:
                    return fh.read()
            return REFUSED                          # PICKLE, TEXT, a path out of the tier: never read

        def remove(self, file_path):
            if type(file_path) is str and ENTRY_FILE.fullmatch(file_path):
                super().remove(file_path)           # only an entry's file, never a path an index row names

    return BytesOnlyDisk


def expand(directory: str) -> str:
    """``~`` and ``$VARS`` expanded on the node (``/scratch/$USER/rhtc-cache``)."""
    return os.path.expandvars(os.path.expanduser(directory))


def disk_tier_of(settings) -> str:
    """The tier id a worker with these settings uses ("" when it has no disk tier)."""
    if not settings.disk_cache:
        return ""
    try:
        return tier_id(private_directory(expand(settings.disk_cache)))
    except (OSError, DiskTierRefused):       # the task process says why (open_disk_tier)
        return ""


def open_disk_tier(settings, worker: str) -> DiskTier | None:
    """The disk tier ``settings.disk_cache`` names, or None (off, or it cannot be used:
    said once, and the worker runs on with its RAM cache only; a directory that is not
    private to the worker's user is an error, logged as one)."""
    if not settings.disk_cache:
        return None
    try:
        return DiskTier(expand(settings.disk_cache), settings.disk_cache_size)
    except DiskTierRefused as err:
        log.error("worker %s: %s", worker, err)
    except ImportError:
        log.warning("worker %s: RHTC_DISK_CACHE=%s but the diskcache package is not installed "
                    "(pip install 'redis-htcondor[disk]'): no disk tier", worker, settings.disk_cache)
    except Exception as err:
        log.warning("worker %s: cannot use the disk cache %s (%s: %s): no disk tier",
                    worker, settings.disk_cache, type(err).__name__, err)
    return None
