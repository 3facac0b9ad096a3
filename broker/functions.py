"""How the broker's scripts are called: as one Redis 7 *function library*, loaded once per
server, or by EVALSHA where functions are not available (Redis 6, or a user without
the FUNCTION permission).

A script sent by EVALSHA runs the generated prelude (:func:`broker.scripts.prelude`: the
layout constants, 33 key builders and the shared steps) on every call before its own
first line; at a thousand idle workers that prelude was most of the broker's CPU (their
heartbeats). In a function library it runs once, when the library is loaded; a call
runs only its function. The library is named by a hash of its code (``rhtc_<hash>``, and
each function ``<script>_<hash>``), so clients and workers of other versions sharing the
broker each find their own; a broker that lost it (restarted without persistence, or
``FUNCTION FLUSH``) gets it again on the first call that misses it. At most
:data:`KEEP_LIBRARIES` rhtc libraries stay loaded: past that, loading ours removes the
others (whoever still uses one loads it again on its next call).

    >>> lib = Library()
    >>> lib.name.startswith("rhtc_") and lib.code.startswith("#!lua name=rhtc_")
    True
    >>> lib["take"].command([], ["ns", "w1"])[:4]     # doctest: +ELLIPSIS
    ('FCALL', 'take_...', 0, 'ns')
"""
from __future__ import annotations

import functools
import hashlib
import threading

import redis

from . import scripts

#: rhtc libraries (of any version) a broker keeps loaded before ours removes the others
KEEP_LIBRARIES = 8
_UNKNOWN, _FUNCTIONS, _EVALSHA = "unknown", "functions", "evalsha"


def missing(err: BaseException) -> bool:
    """Whether ``err`` says the broker does not hold the script or function called (it
    restarted without persistence, flushed them, or never had them)."""
    text = str(err)
    return (isinstance(err, redis.exceptions.NoScriptError) or "Function not found" in text
            or "unknown command 'FCALL'" in text or "unknown command `FCALL`" in text)


@functools.lru_cache(maxsize=1)
def _library_code() -> tuple[str, str]:
    body = [scripts.prelude()]
    for name in scripts.NAMES:
        body.append(f"redis.register_function('{name}_@TAG@', function(KEYS, ARGV)\n{scripts.body(name)}\nend)\n")
    text = "\n".join(body)
    tag = hashlib.sha1(text.encode()).hexdigest()[:12]
    return tag, f"#!lua name=rhtc_{tag}\n" + text.replace("@TAG@", tag)


class Library:
    """The scripts of one broker connection's client: ``lib["take"](args=[...])``, as
    redis-py's ``Script`` is called; FCALL while the broker has functions, else EVALSHA."""

    def __init__(self, r: redis.Redis | None = None):
        self.r = r
        self.tag, self.code = _library_code()
        self.name = f"rhtc_{self.tag}"
        self.mode = _UNKNOWN
        self._lock = threading.Lock()
        self._calls = {name: Call(self, name) for name in scripts.NAMES}

    def __getitem__(self, name: str) -> "Call":
        return self._calls[name]

    def items(self):
        return self._calls.items()

    def ensure(self, call=None) -> None:
        """Load the library into the broker (or learn that it has no functions, and load
        the scripts' EVALSHA fallback instead). ``call`` sends one command and returns its
        reply (a fast lane's :meth:`call`; default: this library's client)."""
        call = call or self.r.execute_command
        with self._lock:
            if self.mode != _EVALSHA:
                try:
                    self._load(call)
                    self.mode = _FUNCTIONS
                    return
                except redis.ResponseError as err:
                    text = str(err)
                    if "unknown command" not in text and "NOPERM" not in text and "no permissions" not in text:
                        raise
                    self.mode = _EVALSHA       # Redis 6, or FUNCTION not allowed: scripts
            for c in self._calls.values():
                call("SCRIPT", "LOAD", c.script)

    def _load(self, call) -> None:
        try:
            call("FUNCTION", "LOAD", self.code)
        except redis.ResponseError as err:
            if "already exists" not in str(err):
                raise
            return
        try:                                   # a size cap on other versions' libraries
            listed = call("FUNCTION", "LIST", "LIBRARYNAME", "rhtc_*")
        except redis.ResponseError:
            return
        names = [_library_name(entry) for entry in listed or []]
        others = [n for n in names if n and n != self.name]
        if len(others) >= KEEP_LIBRARIES:
            for n in others:
                try:
                    call("FUNCTION", "DELETE", n)
                except redis.ResponseError:
                    pass                       # deleted meanwhile by another client


def _library_name(entry) -> str | None:
    """The name in one entry of FUNCTION LIST's reply (a flat list or a dict, by protocol)."""
    if isinstance(entry, dict):
        got = entry.get("library_name", entry.get(b"library_name"))
    else:
        pairs = dict(zip(entry[::2], entry[1::2]))
        got = pairs.get("library_name", pairs.get(b"library_name"))
    return got.decode() if isinstance(got, bytes) else got


class Call:
    """One script of the library."""

    def __init__(self, lib: Library, name: str):
        self.lib, self.name = lib, name
        self.function = f"{name}_{lib.tag}"
        self.script = scripts.prelude() + scripts.body(name)     # the EVALSHA fallback
        self.sha = hashlib.sha1(self.script.encode()).hexdigest()

    def command(self, keys, args) -> tuple:
        """The command that runs this script with ``keys`` and ``args``."""
        if self.lib.mode == _EVALSHA:
            return ("EVALSHA", self.sha, len(keys), *keys, *args)
        return ("FCALL", self.function, len(keys), *keys, *args)

    def __call__(self, keys=(), args=(), client=None):
        """Run it (on ``client``: a pipeline queues it, loaded beforehand) and return its reply."""
        keys, args = list(keys or ()), list(args or ())
        if self.lib.mode == _UNKNOWN:
            self.lib.ensure()
        if client is not None and client is not self.lib.r:
            return client.execute_command(*self.command(keys, args))
        try:
            return self.lib.r.execute_command(*self.command(keys, args))
        except redis.ResponseError as err:
            if not missing(err):
                raise
            self.lib.ensure()                  # the broker lost it: once more, loaded
            return self.lib.r.execute_command(*self.command(keys, args))
