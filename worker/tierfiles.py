"""The files of the node's disk tier (:mod:`worker.disk`): made private whatever the
process's umask, and opened so that an odd entry can neither block a worker nor be read
in place of one of ours.

**Made.** Every folder the tier makes is 0700 and every file 0600, set explicitly: a
folder is made with ``mkdir(name, 0o700)`` and a file with ``O_CREAT | O_EXCL`` and mode
0600 (a umask only takes bits away, so neither is ever wider), then set to exactly that
mode on the descriptor when a strict umask took the owner's bits too. The umask itself is
never changed: it is the whole process's, and a worker has threads. diskcache's own code
would make its folders with ``os.makedirs`` and its files with ``open()``, both at
``0777/0666 & ~umask`` (0775/0664 under umask 002: the group could replace an entry); the
tier's ``diskcache.Disk`` writes its entries through :func:`write_entry` instead.

**Walked, not followed.** An entry ``ab/cd/<name>.val`` is reached one folder at a time
from a descriptor of the tier (``openat``), each step with ``O_NOFOLLOW``: a symbolic link
anywhere on the way, or a file where a folder should be, is an :class:`OddEntry`.

**Opened without blocking, judged on what was opened.** The entry itself is opened with
``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`` (a named pipe opens at once instead of
waiting for a writer, a link is not followed), and only then judged, with ``fstat`` on the
descriptor: it must be a regular file, ours, writable by nobody else. Judging the name
first (``stat``, then ``open``) would judge one file and read another that was swapped in
between; the descriptor is the file that is read.

    >>> import tempfile
    >>> top = tempfile.mkdtemp()
    >>> write_entry(top, "ab/cd/0123.val", b"branch bytes")
    12
    >>> fd = open_entry(top, "ab/cd/0123.val"); os.read(fd, 100); os.close(fd)
    b'branch bytes'
    >>> os.mkfifo(os.path.join(top, "ab/cd/4567.val"))
    >>> open_entry(top, "ab/cd/4567.val")
    Traceback (most recent call last):
    ...
    rhtc.worker.tierfiles.OddEntry: the file ab/cd/4567.val is a named pipe, not a regular file
"""
from __future__ import annotations

import errno
import os
import stat

from ..errors import RhtcError

FOLDER_MODE = 0o700
FILE_MODE = 0o600
#: how an entry is opened: never follows a link, never waits (a named pipe, a device),
#: never becomes the process's terminal, never leaks into a child
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: how a folder on the way to an entry is opened (no read access needed, no link followed)
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC

_KINDS = [(stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISLNK, "a symbolic link"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]


class OddEntry(RhtcError):
    """An entry of the disk tier that is not a regular file of ours that nobody else can
    write (a named pipe, a link, a folder, a device, another user's file): never read."""


def kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a named pipe").

    >>> kind(stat.S_IFIFO | 0o644), kind(stat.S_IFREG)
    ('a named pipe', 'a regular file')
    """
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else "not a file")


def make_folder(path: str, dir_fd: int | None = None) -> bool:
    """Make the folder ``path`` (relative to ``dir_fd`` when given) with mode 0700 whatever
    the umask; False when it exists already (it is left as it is).

    >>> import tempfile; p = os.path.join(tempfile.mkdtemp(), "f")
    >>> make_folder(p), make_folder(p), oct(os.stat(p).st_mode & 0o777)
    (True, False, '0o700')
    """
    try:
        os.mkdir(path, FOLDER_MODE, dir_fd=dir_fd)
    except FileExistsError:
        return False
    st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) != FOLDER_MODE:   # a umask took the owner's bits
        os.chmod(path, FOLDER_MODE, dir_fd=dir_fd)
    return True


def create_file(path: str, dir_fd: int | None = None) -> int:
    """A descriptor open for writing on the new file ``path`` (FileExistsError when it
    exists: never truncates nor follows anything there), mode 0600 whatever the umask."""
    fd = os.open(path, _CREATE_FLAGS, FILE_MODE, dir_fd=dir_fd)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _walk(top: str, folders: list[str], make: bool, relative: str = "") -> int:
    """A descriptor of the folder ``top/folders...``, reached without following a link
    (made, 0700, on the way when ``make``); :class:`OddEntry` when one is not a folder
    (said of the entry ``relative``)."""
    fd = os.open(top, _WALK_FLAGS)
    try:
        for i, name in enumerate(folders):
            if make:
                make_folder(name, dir_fd=fd)
            try:
                nxt = os.open(name, _WALK_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    raise OddEntry(f"the folder {'/'.join(folders[:i + 1])} on the way to {relative} is "
                                   f"{kind(st.st_mode)}, not a folder") from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_entry(top: str, relative: str, data: bytes) -> int:
    """Write ``data`` to the new file ``top/relative`` (its folders made as needed, every
    one 0700, the file 0600); returns the bytes written. OSError when it cannot (a folder
    removed meanwhile by another worker's eviction: the caller tries again)."""
    *folders, name = relative.split("/")
    dir_fd = _walk(top, folders, make=True, relative=relative)
    try:
        fd = create_file(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return len(data)


def open_entry(top: str, relative: str) -> int:
    """A descriptor open for reading on the entry ``top/relative``, once it is known to be
    a regular file owned by this process's user that nobody else can write; otherwise
    :class:`OddEntry` (nothing of it is read) or FileNotFoundError (evicted meanwhile).
    Never blocks, never follows a link (see the module)."""
    *folders, name = relative.split("/")
    dir_fd = _walk(top, folders, make=False, relative=relative)
    try:
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise OddEntry(f"the file {relative} is a symbolic link, not a regular file") from None
            if err.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP, errno.EWOULDBLOCK):
                raise OddEntry(f"the file {relative} is not a regular file (it cannot be opened: "
                               f"{err.strerror})") from None
            raise
    finally:
        os.close(dir_fd)
    try:
        judge(os.fstat(fd), f"the file {relative}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def judge(st: os.stat_result, what: str) -> None:
    """:class:`OddEntry` unless ``st`` is a regular file of ours that only we can write."""
    if not stat.S_ISREG(st.st_mode):
        raise OddEntry(f"{what} is {kind(st.st_mode)}, not a regular file")
    if st.st_uid != os.geteuid():
        raise OddEntry(f"{what} belongs to uid {st.st_uid}, not to uid {os.geteuid()} who runs the worker")
    if st.st_mode & 0o022:
        raise OddEntry(f"{what} has mode {oct(stat.S_IMODE(st.st_mode))}: other users can write it")
