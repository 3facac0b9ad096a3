"""NanoAOD over XRootD (``root://``): the client settings every reader uses, globs through
the server's directory listing, and XRootD errors told in words that say what to do.

Needs the ``[xrootd]`` extra (``pip install 'redis-htcondor[xrootd]'``: the XRootD client
from PyPI and fsspec-xrootd). ``make_chunks`` and ``Chunk.arrays`` call into this module
for every ``root://`` or ``roots://`` path, so workers inherit the settings below simply
by reading a chunk: they are applied to the process before its first XRootD call.

    >>> from rhtc.client.data.xrootd import split_url, is_remote
    >>> split_url("root://eos.cern.ch:1094//eos/cms/store/nano.root")
    ('root://eos.cern.ch:1094', '/eos/cms/store/nano.root')
    >>> split_url("root://eos.cern.ch/store/nano.root")      # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: root://eos.cern.ch/store/nano.root has one slash after the host...
    >>> is_remote("root://eos.cern.ch//a.root"), is_remote("/data/a.root")
    (True, False)

:data:`SETTINGS` (the XrdCl environment) were chosen by measurement (README, "NanoAOD over
XRootD"); each ``XRD_*`` value yields to the variable of the same name in the environment
of the client and of the workers. The request timeout is one setting,
``XRD_REQUESTTIMEOUT`` (:func:`request_timeout`): XrdCl, fsspec-xrootd, uproot's source
and the directory listings of globs all wait that long for one request.
"""
from __future__ import annotations

import fnmatch
import os
import re
import threading
from typing import Any
from rhtc import credentials
from rhtc.errors import RhtcError

from ...broker.wire.config import settings

SCHEMES = ("root://", "roots://")

#: XRootD client environment (XrdCl reads each at its first use in a process).
SETTINGS: dict[str, str] = {
    "XRD_CONNECTIONWINDOW": "10",     # s for one connection attempt (default 120)
    "XRD_CONNECTIONRETRY": "1",       # attempts (default 5): a refused connection is news at once;
                                      # Chunk.arrays retries (READ_RETRIES, with back-off) instead
    "XRD_REQUESTTIMEOUT": "60",       # s for one request (default 1800): every reader, see request_timeout()
    "XRD_STREAMTIMEOUT": "60",        # s of silence on a busy stream (default 60)
    "XRD_STREAMERRORWINDOW": "0",     # reconnect at once after a stream error (default 1800 s!)
    "XRD_TIMEOUTRESOLUTION": "1",     # check the timeouts every second (default 15)
    "XRD_PARALLELEVTLOOP": "1",       # event-loop threads per worker process (default 10)
}
#: How root:// files are read: uproot's fsspec source through fsspec-xrootd (concurrent
#: reads of coalesced ranges; uproot's XRootDSource failed vector reads of a real 2015
#: NanoAOD file with "Invalid operation"). Their timeout is :func:`request_timeout`.
#: times a transient failure (server unreachable, timeout, connection dropped) of one read
#: is retried inside ``Chunk.arrays``, reopening the file, before ChunkFileError is raised.
READ_RETRIES = settings().xrootd_retries

_applied = False
_lock = threading.Lock()


def is_remote(path: str) -> bool:
    """True for an XRootD URL (``root://`` or ``roots://``)."""
    return isinstance(path, str) and path.startswith(SCHEMES)


def split_url(url: str) -> tuple[str, str]:
    """(server, absolute path) of a ``root://host[:port]//path`` URL; ValueError saying
    what to write for anything else (checked before any request is made).

    A single slash after the host makes the path relative, which XRootD servers refuse
    ("[3010] Opening relative path ... is disallowed"): the URL is refused here instead.
    """
    scheme, rest = url.split("://", 1)
    server, slash, path = rest.partition("/")
    host = server.rsplit("@", 1)[-1]
    if not host or host.startswith(":") or not path.strip("/"):
        raise ValueError(f"{url} is not an XRootD URL of the form {scheme}://host[:port]//path/to/file.root "
                         "(a host, then two slashes and the absolute path)")
    if not path.startswith("/"):
        raise ValueError(f"{url} has one slash after the host, which makes {path!r} a relative path "
                         f"that XRootD servers refuse: use two slashes after the host, "
                         f"{scheme}://{server}//{path}")
    return f"{scheme}://{server}", "/" + path.lstrip("/")


def request_timeout() -> int:
    """Seconds one XRootD request may take: ``XRD_REQUESTTIMEOUT`` from this process's
    environment, else :data:`SETTINGS`' value. XrdCl, fsspec-xrootd (every read, open and
    listing), uproot's source and the advice in :func:`explain` all use this one number.

    >>> request_timeout() > 0
    True
    """
    raw = os.environ.get("XRD_REQUESTTIMEOUT") or SETTINGS["XRD_REQUESTTIMEOUT"]
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"XRD_REQUESTTIMEOUT={raw!r} is not a whole number of seconds "
                         f"(default {SETTINGS['XRD_REQUESTTIMEOUT']})") from None
    if value <= 0:
        raise ValueError(f"XRD_REQUESTTIMEOUT={raw!r} must be a positive number of seconds")
    return value


def apply_settings() -> None:
    """Put :data:`SETTINGS` into this process's XRootD client (once; the environment wins).

    (not run by the tests: they need an XRootD server; tests/scenarios/test_nanoaod_over_xrootd.py starts one)
    >>> apply_settings()                         # doctest: +SKIP
    """
    global _applied
    if _applied:
        return
    with _lock:
        if _applied:
            return
        for name, value in SETTINGS.items():
            os.environ.setdefault(name, value)
        try:                                     # XrdCl may already be loaded (uproot, fsspec)
            from XRootD import client
        except ImportError:
            _applied = True
            return
        for name in SETTINGS:
            value = os.environ[name]
            if value.lstrip("-").isdigit():
                client.EnvPutInt(_env_key(name), int(value))
        from fsspec_xrootd import XRootDFileSystem
        XRootDFileSystem.default_timeout = request_timeout()    # its default: none
        _applied = True


def forget_connections() -> None:
    """Drop fsspec-xrootd's cached filesystems and their open file handles, so that the
    next open starts afresh (after a dropped connection they stay broken otherwise)."""
    try:
        from fsspec_xrootd import XRootDFileSystem
    except ImportError:
        return
    XRootDFileSystem.clear_instance_cache()


def stat(url: str) -> tuple | None:
    """What the server reports about a file that changes when it is rewritten: (id, size,
    mtime, ctime), as far as it reports them; None when the stat fails (the read that
    follows then fails with the server's own words).

    >>> stat("root://localhost:1094//store/nano/a.root")      # doctest: +SKIP
    ('2251799813685249', 4230127, 1763900000, 1763900000)
    """
    return stat_later(url)()


def stat_later(url: str):
    """Sends the stat of ``url`` and returns a function that waits for :func:`stat`'s
    answer, so that the caller's own request to the server overlaps its round trip."""
    server, path = split_url(url)
    try:
        from XRootD.client.utils import AsyncResponseHandler
        handler = AsyncResponseHandler()
        sent = _filesystem(server).stat(path, timeout=request_timeout(), callback=handler)
    except Exception:                     # no client, or the client itself failed
        return lambda: None
    if not sent.ok:
        return lambda: None

    def answer() -> tuple | None:
        status, info, _ = handler.wait()
        if not status.ok or info is None:
            return None
        return tuple(getattr(info, name, None) for name in ("id", "size", "mtime", "ctime"))
    return answer


def _env_key(name: str) -> str:
    """XRD_CONNECTIONWINDOW -> ConnectionWindow (XrdCl's own spelling)."""
    known = {"CONNECTIONWINDOW": "ConnectionWindow", "CONNECTIONRETRY": "ConnectionRetry",
             "REQUESTTIMEOUT": "RequestTimeout", "STREAMTIMEOUT": "StreamTimeout",
             "STREAMERRORWINDOW": "StreamErrorWindow", "TIMEOUTRESOLUTION": "TimeoutResolution",
             "PARALLELEVTLOOP": "ParallelEvtLoop"}
    return known[name[len("XRD_"):]]


def require_client() -> None:
    """Raise ImportError saying what to install when the XRootD client is missing."""
    try:
        import XRootD.client  # noqa: F401
        import fsspec_xrootd  # noqa: F401
    except ImportError as err:
        raise ImportError(f"reading root:// files needs the XRootD client ({err}): "
                          "pip install 'redis-htcondor[xrootd]' (on the workers too)") from err


def open_options() -> dict[str, Any]:
    """uproot.open keyword arguments for a root:// file, with the settings applied."""
    require_client()
    apply_settings()
    import uproot
    return {"handler": uproot.source.fsspec.FSSpecSource, "timeout": request_timeout()}


def _filesystem(server: str):
    require_client()
    apply_settings()
    from XRootD import client
    return client.FileSystem(server)


def expand(url: str) -> list[str]:
    """The files a ``root://`` URL names: itself, or, when its path has ``*?[``, the
    matches from the server's directory listing (sorted; patterns in any component).

    >>> expand("root://localhost:1094//store/nano/*.root")      # doctest: +SKIP
    ['root://localhost:1094//store/nano/a.root', 'root://localhost:1094//store/nano/b.root']
    """
    server, path = split_url(url)
    if not any(c in path for c in "*?["):
        return [url]
    fs = _filesystem(server)
    found = ["/"]
    for part in [p for p in path.split("/") if p]:
        nxt = []
        for base in found:
            if not any(c in part for c in "*?["):
                nxt.append(base.rstrip("/") + "/" + part)
                continue
            status, listing = fs.dirlist(base, timeout=request_timeout())
            if not status.ok:
                if len(found) == 1:
                    reason, message = explain(f"{server}/{base}", status.message)
                    raise ListingFailed(f"cannot list {url}: {message}", reason)
                continue
            nxt += [base.rstrip("/") + "/" + e.name for e in listing
                    if fnmatch.fnmatchcase(e.name, part)]
        found = nxt
    return sorted(f"{server}/{p}" for p in found)


class ListingFailed(OSError, RhtcError):
    """A glob's directory could not be listed; ``reason`` as from :func:`explain`."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


# (reason, transient, pattern, what to do). Patterns match XrdCl's messages and codes
# (server kXR_* errors in brackets, client statuses in words).
_CAUSES = [
    ("server unreachable", True, r"connection (error|refused)|invalid address|socket (error|disconnected)|"
     r"stream disconnect|no route|network|connection reset|broken pipe|handshake|on closed file",
     "check the host and port and that the server is up (`xrdfs {server} query config version`); "
     "a transient outage can be retried with remote_map(..., retry_on=(ChunkFileError,))"),
    ("timed out", True, r"operation expired|timed? ?out|socket timeout|\[206\]",
     "the server did not answer within XRD_REQUESTTIMEOUT ({timeout} s): it is stalled or overloaded; "
     "retry with remote_map(..., retry_on=(ChunkFileError,)), or raise XRD_REQUESTTIMEOUT in the "
     "workers' environment if its answers are merely slow"),
    ("bad URL", False, r"relative path",
     "use two slashes after the host ({server}//{relpath}): the path must be absolute"),
    ("no such file", False, r"\[3011\]|no such file",
     "check the path: list the directory with `xrdfs {server} ls {dir}`, or glob it in make_chunks"),
    ("permission denied", False, r"\[3010\]|not authori[sz]ed|permission denied|auth.*failed",
     "check your credentials (a valid grid proxy: voms-proxy-init; or a token in BEARER_TOKEN) "
     "and that the server exports this path to you"),
]


def explain(url: str, error: BaseException | str) -> tuple[str, str]:
    """(reason, message) for an XRootD failure on ``url``: the message names the URL,
    says what went wrong and what to do next. Reasons: ``no such file``, ``permission
    denied``, ``bad URL`` (a relative path the server refused), ``timed out``, ``server
    unreachable``, or ``read failed``.

    >>> explain("root://h//a.root", "[ERROR] Server responded with an error: [3011] no such file")[0]
    'no such file'
    """
    text = str(error)
    found = re.search(r"\[(ERROR|FATAL)\][^\n]*", text)       # XrdCl's own words, without uproot's wrapping
    text = " ".join((found.group(0) if found else text.split("\n\n")[0]).split())
    if text.count(")") > text.count("("):
        text = text.rstrip(")")
    try:
        server, path = split_url(url)
    except ValueError:
        scheme, _, rest = url.partition("://")
        host, _, rel = rest.partition("/")
        server, path = f"{scheme}://{host}", "/" + rel
    for reason, _, pattern, todo in _CAUSES:
        if re.search(pattern, text, re.IGNORECASE):
            todo = todo.format(server=server, dir=os.path.dirname(path) or "/", relpath=path.lstrip("/"),
                               timeout=request_timeout())
            if reason == "permission denied":
                todo += f"; {credentials.permission_note()}"
            return reason, f"{url}: {reason} ({text}); {todo}"
    return "read failed", f"{url}: XRootD read failed ({text}); retry, or check the file with `xrdfs {server} stat {path}`"


def is_transient(reason: str) -> bool:
    """True for failures a retry may cure (timeouts, an unreachable or dropped server)."""
    return any(reason == r and transient for r, transient, _, _ in _CAUSES)


def retry_pause(attempt: int) -> float:
    """Seconds to wait before in-task retry ``attempt + 1`` of a read (0.5, 1, 2, ...)."""
    return 0.5 * 2 ** attempt


def transient_failure(url: str, error: BaseException) -> bool:
    """True if ``error`` (or an error it wraps, as coffea wraps a processor's) is a
    transient XRootD failure of ``url``: worth an in-task retry."""
    seen, todo = set(), [error]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, OSError):
            reason = getattr(err, "reason", None) or explain(url, err)[0]
            if is_transient(reason):
                return True
        todo += [err.__cause__, err.__context__]
    return False
