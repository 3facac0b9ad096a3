"""Every tunable of the broker, the workers and the client (:class:`Settings`), each
declared once with its default, its ``RHTC_<NAME>`` variable, how that is read and which
values can work; and the parsers of sizes and durations the command lines share.

A value that cannot work is refused, naming the variable and what it takes; a value that
works but is below a useful floor is raised to it (each setting says which):

    >>> Settings.from_env({"RHTC_LEASE": "0"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rhtc.broker.settings.SettingRefused: $RHTC_LEASE='0' cannot work: it takes a number of at least 0.5 ...
    >>> Settings.from_env({"RHTC_OPEN_FILES": "0"}).open_files
    1
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import re

from rhtc.errors import RhtcError


class SettingRefused(ValueError, RhtcError):
    """An ``RHTC_*`` variable holds a value that cannot work (a lease of 0, not a number,
    infinite); the message names the variable and what it takes."""


def mib(n: float) -> str:
    """A size in the binary units Redis and our byte settings use: '64.0 MiB'.

    >>> mib(64 * 1024 * 1024), mib(520e6)
    ('64.0 MiB', '495.9 MiB')
    """
    return f"{n / 2**20:.1f} MiB"


_UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9,
          "T": 1e12, "TB": 1e12, "KIB": 1024, "MIB": 1024 ** 2, "GIB": 1024 ** 3, "TIB": 1024 ** 4}


def parse_size(text: str | int | float) -> int:
    """``"4GB"`` -> 4_000_000_000; ``"512MiB"``, ``"1.5G"`` and plain numbers work too.

    >>> parse_size("4GB"), parse_size("512MiB"), parse_size(100)
    (4000000000, 536870912, 100)
    """
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"cannot read {text!r} as a size: use e.g. 4GB, 512MB, 2GiB or a number of bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


_SECONDS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | int | float) -> float:
    """``"8h"`` -> 28800.0; ``"20m"``, ``"90s"``, ``"1.5h"``, ``"2d"`` and plain seconds work too.

    >>> parse_duration("8h"), parse_duration("20m"), parse_duration("90"), parse_duration(60)
    (28800.0, 1200.0, 90.0, 60.0)
    """
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SECONDS:
        raise ValueError(f"cannot read {text!r} as a duration: use e.g. 8h, 20m, 90s, 2d or a number of seconds")
    return float(m.group(1)) * _SECONDS[m.group(2).lower()]


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("use 1 or 0")


#: how a setting's text in the environment becomes its value, by the field's kind
_PARSERS = {"float": float, "int": lambda t: int(float(t)), "bool": _parse_bool, "str": str, "size": parse_size,
            "duration": parse_duration}
_ACCEPTS = {"float": "a number", "int": "a whole number", "bool": "1 or 0", "str": "text",
            "size": "a size such as 64MiB, 20GB or a number of bytes",
            "duration": "a duration such as 8h, 20m, 90s or a number of seconds"}


def setting(default, *, kind: str | None = None, minimum: float | None = None, refuse_below: float | None = None,
            env: str | None = None, doc: str = ""):
    """One setting of :class:`Settings`: its default, how its ``RHTC_<NAME>`` variable is
    read (``kind``: float, int, bool, str, size or duration; by default the default's type),
    its bound, and what it does. The bound is one of two: ``minimum``, a floor that smaller
    values are raised to (they would work, only worse), or ``refuse_below``, under which a
    value cannot work and is refused (:class:`SettingRefused`). A number that is not finite
    (nan, inf) is refused for every setting. Everything :meth:`Settings.from_env` and the
    docs need comes from here."""
    kind = kind or type(default).__name__
    if kind not in _PARSERS:
        raise TypeError(f"setting kind {kind!r}: use one of {', '.join(_PARSERS)}")
    if minimum is not None and refuse_below is not None:
        raise TypeError("a setting has one bound: minimum= (raised to it) or refuse_below= (refused), not both")
    return dataclasses.field(default=default, metadata={"kind": kind, "minimum": minimum,
                                                        "refuse_below": refuse_below, "env": env, "doc": doc})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every tunable of the broker, the workers and the client, each declared once below
    and read once from the environment (``RHTC_<NAME IN CAPITALS>``, e.g. ``RHTC_LEASE``)
    by :func:`settings`, then passed on from there.

    >>> Settings().lease
    5.0
    >>> Settings.env_name("max_result_bytes")
    'RHTC_MAX_RESULT_BYTES'
    """

    lease: float = setting(5.0, refuse_below=0.5, doc="a worker silent this long is dead (s)")  # it beats 0.2 s apart
    map_ttl: int = setting(120, refuse_below=1, doc="a map whose client stopped renewing it expires after this (s)")
    result_ttl: int = setting(600, refuse_below=1, doc="unread results of an abandoned map expire after this (s)")
    result_grace: int = setting(30, refuse_below=0, doc="a result list outlives its map by this much (s)")
    function_ttl: int = setting(600, refuse_below=1, doc="a function blob expires this long after its last map (s)")
    log_ttl: int = setting(86400, refuse_below=1, doc="the problem log expires after this (s)")
    max_attempts: int = setting(3, refuse_below=1, doc="runs of a task that killed its worker, in all")
    retry_delay: float = setting(1.0, refuse_below=0, doc="pause before a retry (s), doubling, jittered")
    open_files: int = setting(16, minimum=1, doc="files a worker keeps open, with their trees' metadata")
    leases: bool = setting(True, doc="0 only to measure what leases cost")
    steal_min_queue: int = setting(4, minimum=1, doc="steal from a live worker's queue this long...")
    steal_home_min_queue: int = setting(16, minimum=1, doc="... this long for a task queued where its chunk is cached")
    steal_stuck_seconds: float = setting(10.0, refuse_below=0, doc="... or whose current task has run this long (s)")
    max_result_bytes: int = setting(64 * 1024 * 1024, kind="size", refuse_below=1, doc="the largest result a task may return")
    broker_patience: float = setting(300.0, refuse_below=0, doc="the client waits this long for a lost broker (s)")
    scan_step: int = setting(2000, minimum=1, doc="items one Lua call looks at, at most")
    fair_window: int = setting(8, minimum=1, doc="tasks of one map in the shared queue at a time (more only while "
                            "idle workers wait: lease_one.lua)")
    client_ttl: float = setting(10.0, minimum=1.0, doc="a client silent this long is dead, its maps dropped (s)")
    malloc_tuning: bool = setting(True, doc="0 turns the workers' malloc tuning off")
    token_ttl: float = setting(30.0, minimum=2.0, doc="a map's signed liveness token lasts this long "
                                                      "(broker clock) unless its client renews it (s)")
    unclaimed_seconds: float = setting(10.0, minimum=1.0, doc="tasks sit this long in the queue of a "
                                       "'live' worker that takes none: the client takes them back (s)")
    feed_entries: int = setting(600, minimum=1, doc="the dashboard's feed keeps this many entries")
    feed_ttl: int = setting(600, refuse_below=1, doc="... and expires this long after the last one (s)")
    xrootd_retries: int = setting(2, refuse_below=0, doc="a root:// read that fails is tried again this many times")
    disk_cache: str = setting("", doc="the node's disk tier: a node-local directory shared by the "
                                      "node's workers ('' = off)")
    disk_cache_size: int = setting(20 * 10 ** 9, kind="size", refuse_below=0, doc="the disk tier's cap for the whole node")
    disk_holds_ttl: int = setting(7 * 86400, refuse_below=1, doc="the broker forgets what a node's disk holds this long "
                                                 "after its last addition (s)")
    lifetime: float = setting(0.0, kind="duration", refuse_below=0, doc="a worker leaves on its own terms this long after "
                              "it starts: it drains (takes no new task, finishes what it runs) and exits 0 "
                              "(0 = the job's walltime where the batch system says it, else never)")
    lifetime_margin: float = setting(300.0, kind="duration", refuse_below=0, doc="the drain starts this long before the "
                                     "lifetime ends, at most a tenth of the lifetime (s)")
    lifetime_stagger: float = setting(0.1, minimum=0.0, doc="each worker's lifetime is cut by a random "
                                      "part of this fraction of it, so a pool does not leave at once")
    idle_timeout: float = setting(0.0, kind="duration", refuse_below=0, doc="a worker with no task this long leaves and "
                                  "releases its slot, unless the pool would fall under its keeper's "
                                  "minimum (0 = never)")
    merge_tasks: int = setting(64, minimum=1, doc="a worker merging a map's results (reduce=) hands its "
                               "partial in after this many tasks ...")
    merge_seconds: float = setting(10.0, minimum=0.0, doc="... or once it is this old, or when its queue "
                                   "runs dry (s) ...")
    merge_rate: float = setting(10.0, minimum=0.1, doc="... but no sooner than (workers / this) s: a pool's "
                                "partials reach the client at most this many a second")
    merge_fanin: int = setting(8, minimum=1, doc="the tree of partials (the client's, sent with the map): a "
                               "worker whose map has nothing left queued for it folds up to this many partials "
                               "(its own and others') at a time before handing the result up, so a map's end "
                               "brings its client one partial, not one per worker (1: no tree)")
    check_invariants: bool = setting(False, doc="1: every map checks that its task containers agree "
                                                "when it ends (the tests set it; client/engine/invariants.py)")
    preload: str = setting("numpy,awkward,uproot,hist,coffea", doc="modules an idle worker imports before its "
                           "first task, those installed (comma-separated; 'none' for none: worker/preload.py)")

    @property
    def heartbeat(self) -> float:
        """How often a worker says it is alive: a quarter of the lease, 0.2-1 s."""
        return max(0.2, min(1.0, self.lease / 4))

    @property
    def idle_heartbeat(self) -> float:
        """How often an idle worker (no task, nothing held) says it is alive: twice as
        seldom as a busy one, and still at least two and a half times a lease. Its name
        expires one lease after its last beat either way; what an idle worker's beat
        renews is a name that holds nothing, so the broker need not hear it as often
        (a thousand idle workers' beats were most of an idle broker's CPU)."""
        return min(2 * self.heartbeat, self.lease / 2.5)

    @property
    def reconcile(self) -> float:
        """How often a worker checks its lease against what it runs (C3): one lease."""
        return self.lease

    @property
    def holds_ttl(self) -> int:
        return max(600, int(self.lease * 4))

    @staticmethod
    def env_name(name: str) -> str:
        """The environment variable of setting ``name``."""
        return SETTINGS_FIELDS[name].metadata["env"] or f"RHTC_{name.upper()}"

    @classmethod
    def from_env(cls, environ=None) -> "Settings":
        """The settings with every ``RHTC_<NAME>`` that is set (and not empty) applied; a
        value that cannot be read or cannot work raises :class:`SettingRefused` (a
        ValueError) naming the variable and what it takes.

        >>> Settings.from_env({"RHTC_LEASE": "2.5", "RHTC_LEASES": "0", "RHTC_OPEN_FILES": "0"})  # doctest: +ELLIPSIS
        Settings(lease=2.5, ..., open_files=1, leases=False, ...)
        >>> Settings.from_env({"RHTC_DISK_CACHE_SIZE": "lots"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rhtc.broker.settings.SettingRefused: $RHTC_DISK_CACHE_SIZE='lots' is not a size such as 64MiB, 20GB or a number of bytes ...
        """
        environ = os.environ if environ is None else environ
        values = {}
        for f in dataclasses.fields(cls):
            name = cls.env_name(f.name)
            raw = environ.get(name)
            if raw in (None, ""):
                continue
            values[f.name] = _read(f, name, raw)
        return cls(**values)


def _read(f: dataclasses.Field, name: str, raw: str):
    """The value of setting ``f`` from its variable ``name``'s text ``raw``: parsed, refused
    when it cannot work, raised to its floor."""
    kind, minimum, least = f.metadata["kind"], f.metadata["minimum"], f.metadata["refuse_below"]
    what = f"({f.metadata['doc']}; default {f.default!r})"
    try:
        value = _PARSERS[kind](raw)
    except (ValueError, TypeError, OverflowError):
        raise SettingRefused(f"${name}={raw!r} is not {_ACCEPTS[kind]} {what}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingRefused(f"${name}={raw!r} cannot work: it takes a finite number {what}")
    if least is not None and value < least:
        raise SettingRefused(f"${name}={raw!r} cannot work: it takes {_ACCEPTS[kind].split(' such as')[0]} "
                             f"of at least {least:g} {what}; unset it for the default")
    return max(value, minimum) if minimum is not None else value


#: the fields of :class:`Settings` by name
SETTINGS_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


@functools.lru_cache(maxsize=1)
def settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings.from_env()
