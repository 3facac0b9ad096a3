"""Every tunable of the broker, the workers and the client (:class:`Settings`), each
declared once with its default, its ``RHTC_<NAME>`` variable, how that is read and which
values can work (sizes and durations are read by broker/wire/amounts.py).

Every number has a range. A value outside it is refused when the process starts, naming the
variable, the value and the range (a worker exits saying so, a client raises
:class:`SettingRefused`); only a value that works but is below a useful floor is raised to it
(each setting says which). :func:`settings_table` lists them all, for the docs:

    >>> Settings.from_env({"RHTC_LEASE": "0"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rhtc.broker.wire.settings.SettingRefused: $RHTC_LEASE='0' cannot work: it takes a number from 0.5 to 31536000 ...
    >>> Settings.from_env({"RHTC_OPEN_FILES": "0"}).open_files
    1
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import NamedTuple

from rhtc.errors import RhtcError

from .amounts import SECONDS, UNITS, mib, parse_duration, parse_size, read_duration, read_size  # noqa: F401


class SettingRefused(ValueError, RhtcError):
    """An ``RHTC_*`` variable (or a worker's option) holds a value that cannot work (a lease
    of 0 or of 1e17, not a number, infinite); the message names the variable, the value and
    the range it takes."""


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("use 1 or 0")


#: how a setting's text in the environment becomes its value, by the field's kind (an int or a
#: size is read as a number, checked against its range, then truncated: "1e3" is 1000)
_PARSERS = {"float": float, "int": float, "bool": _parse_bool, "str": str, "size": read_size, "duration": read_duration}
_ACCEPTS = {"float": "a number", "int": "a whole number", "bool": "1 or 0", "str": "text",
            "size": "a size such as 64MiB, 20GB or a number of bytes",
            "duration": "a duration such as 8h, 20m, 90s or a number of seconds"}
NUMERIC_KINDS = ("float", "int", "size", "duration")

# -- the ranges, one bound per class of setting (``maximum=``; a value above it is refused) --
#: Times (leases, TTLs, pauses, patience; in seconds): at most a year. Redis takes them as
#: EXPIRE seconds or PEXPIRE/PX milliseconds (a 64-bit integer) and the Lua scripts add them
#: to its clock in ms as doubles (exact below 2**53 ms, 285,000 years): a year (3.2e10 ms)
#: is far inside both, and longer than any map, job or outage; more is a typo.
YEAR = 365 * 86400
#: Counts (items one Lua call walks, entries one key keeps, files one process holds open,
#: partials a second): at most 100,000. A Lua call blocks the broker for everyone while it
#: runs (100,000 items: tens of ms), and 100,000 entries or files is already a lot of memory.
MANY = 100_000
#: What one hand-in of merged results covers (tasks, partials folded): at most 1,000. The
#: hand-in names each in one Lua call, whose unpack() takes fewer than 8,000 values.
HAND_IN = 1_000
#: Queue lengths a worker compares its queues with: at most 2**32, the most a Redis list
#: holds (so 2**32 means "never").
QUEUE_LENGTH = 2 ** 32
#: Tries of one thing (runs of a task that kills its worker, reads of a file): at most 100;
#: beyond that a retry is a loop.
TRIES = 100
#: Sizes (bytes): at most 1 PiB, more than any node's disk or broker's memory, and a whole
#: number that a Lua double still holds exactly (2**50 < 2**53).
PIB = 2 ** 50
#: Fractions of a lifetime: at most a half (worker/lifetime.py takes no more of it).
HALF = 0.5


def setting(default, *, kind: str | None = None, minimum: float | None = None, refuse_below: float | None = None,
            maximum: float | None = None, env: str | None = None, doc: str = ""):
    """One setting of :class:`Settings`: its default, how its ``RHTC_<NAME>`` variable is
    read (``kind``: float, int, bool, str, size or duration; by default the default's type),
    its range, and what it does. A number's range has two ends. Its low end is one of two:
    ``minimum``, a floor that smaller values are raised to (they would work, only worse), or
    ``refuse_below``, under which a value cannot work and is refused (:class:`SettingRefused`).
    Its high end, ``maximum`` (required), is always a refusal: a value that large is a typo
    or a unit mistake, not a preference. A number that is not finite (nan, inf) is refused
    for every setting. Everything :meth:`Settings.from_env` and the docs need comes from here."""
    kind = kind or type(default).__name__
    if kind not in _PARSERS:
        raise TypeError(f"setting kind {kind!r}: use one of {', '.join(_PARSERS)}")
    if minimum is not None and refuse_below is not None:
        raise TypeError("a setting has one low bound: minimum= (raised to it) or refuse_below= (refused), not both")
    if kind in NUMERIC_KINDS:
        least = refuse_below if refuse_below is not None else minimum
        if maximum is None or least is None or not least <= default <= maximum:
            raise TypeError(f"a {kind} setting needs minimum= or refuse_below=, and maximum=, around its "
                            f"default {default!r}")
    elif minimum is not None or refuse_below is not None or maximum is not None:
        raise TypeError(f"a {kind} setting has no range")
    return dataclasses.field(default=default, metadata={"kind": kind, "minimum": minimum, "maximum": maximum,
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

    lease: float = setting(5.0, refuse_below=0.5, maximum=YEAR,  # it beats 0.2 s apart
                           doc="a worker silent this long is dead (s)")
    map_ttl: int = setting(120, refuse_below=1, maximum=YEAR,
                           doc="a map whose client stopped renewing it expires after this (s)")
    result_ttl: int = setting(600, refuse_below=1, maximum=YEAR,
                              doc="unread results of an abandoned map expire after this (s)")
    result_grace: int = setting(30, refuse_below=0, maximum=YEAR, doc="a result list outlives its map by this much (s)")
    function_ttl: int = setting(600, refuse_below=1, maximum=YEAR,
                                doc="a function blob expires this long after its last map (s)")
    log_ttl: int = setting(86400, refuse_below=1, maximum=YEAR, doc="the problem log expires after this (s)")
    max_attempts: int = setting(3, refuse_below=1, maximum=TRIES, doc="runs of a task that killed its worker, in all")
    retry_delay: float = setting(1.0, refuse_below=0, maximum=YEAR, doc="pause before a retry (s), doubling, jittered")
    open_files: int = setting(16, minimum=1, maximum=MANY, doc="files a worker keeps open, with their trees' metadata")
    leases: bool = setting(True, doc="0 only to measure what leases cost")
    steal_min_queue: int = setting(4, minimum=1, maximum=QUEUE_LENGTH,
                                   doc="steal from a live worker's queue this long...")
    steal_home_min_queue: int = setting(16, minimum=1, maximum=QUEUE_LENGTH,
                                        doc="... this long for a task queued where its chunk is cached")
    steal_stuck_seconds: float = setting(10.0, refuse_below=0, maximum=YEAR,
                                         doc="... or whose current task has run this long (s)")
    max_result_bytes: int = setting(64 * 1024 * 1024, kind="size", refuse_below=1, maximum=PIB,
                                    doc="the largest result a task may return")
    broker_patience: float = setting(300.0, refuse_below=0, maximum=YEAR,
                                     doc="the client waits this long for a lost broker (s)")
    scan_step: int = setting(2000, minimum=1, maximum=MANY, doc="items one Lua call looks at, at most")
    fair_window: int = setting(8, minimum=1, maximum=MANY, doc="tasks of one map in the shared queue at a time (more "
                               "only while idle workers wait: lease_one.lua)")
    client_ttl: float = setting(10.0, minimum=1.0, maximum=YEAR,
                                doc="a client silent this long is dead, its maps dropped (s)")
    malloc_tuning: bool = setting(True, doc="0 turns the workers' malloc tuning off")
    token_ttl: float = setting(30.0, minimum=2.0, maximum=YEAR, doc="a map's signed liveness token lasts this long "
                               "(broker clock) unless its client renews it (s)")
    unclaimed_seconds: float = setting(10.0, minimum=1.0, maximum=YEAR, doc="tasks sit this long in the queue of a "
                                       "'live' worker that takes none: the client takes them back (s)")
    feed_entries: int = setting(600, minimum=1, maximum=MANY, doc="the dashboard's feed keeps this many entries")
    feed_ttl: int = setting(600, refuse_below=1, maximum=YEAR, doc="... and expires this long after the last one (s)")
    xrootd_retries: int = setting(2, refuse_below=0, maximum=TRIES,
                                  doc="a root:// read that fails is tried again this many times")
    disk_cache: str = setting("", doc="the node's disk tier: a node-local directory shared by the "
                                      "node's workers ('' = off)")
    disk_cache_size: int = setting(20 * 10 ** 9, kind="size", refuse_below=0, maximum=PIB,
                                   doc="the disk tier's cap for the whole node")
    disk_holds_ttl: int = setting(7 * 86400, refuse_below=1, maximum=YEAR, doc="the broker forgets what a node's "
                                  "disk holds this long after its last addition (s)")
    lifetime: float = setting(0.0, kind="duration", refuse_below=0, maximum=YEAR, doc="a worker leaves on its own "
                              "terms this long after it starts: it drains (takes no new task, finishes what it "
                              "runs) and exits 0 (0 = the job's walltime where the batch system says it, else never)")
    lifetime_margin: float = setting(300.0, kind="duration", refuse_below=0, maximum=YEAR, doc="the drain starts "
                                     "this long before the lifetime ends, at most a tenth of the lifetime (s)")
    lifetime_stagger: float = setting(0.1, minimum=0.0, maximum=HALF, doc="each worker's lifetime is cut by a random "
                                      "part of this fraction of it, so a pool does not leave at once")
    idle_timeout: float = setting(0.0, kind="duration", refuse_below=0, maximum=YEAR, doc="a worker with no task "
                                  "this long leaves and releases its slot, unless the pool would fall under its "
                                  "keeper's minimum (0 = never)")
    merge_tasks: int = setting(64, minimum=1, maximum=HAND_IN, doc="a worker merging a map's results (reduce=) hands "
                               "its partial in after this many tasks ...")
    merge_seconds: float = setting(10.0, minimum=0.0, maximum=YEAR, doc="... or once it is this old, or when its "
                                   "queue runs dry (s) ...")
    merge_rate: float = setting(10.0, minimum=0.1, maximum=MANY, doc="... but no sooner than (workers / this) s: a "
                                "pool's partials reach the client at most this many a second")
    merge_fanin: int = setting(8, minimum=1, maximum=HAND_IN, doc="the tree of partials (the client's, sent with the "
                               "map): a worker whose map has nothing left queued for it folds up to this many "
                               "partials (its own and others') at a time before handing the result up, so a map's "
                               "end brings its client one partial, not one per worker (1: no tree)")
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
        value that cannot be read or is out of its range raises :class:`SettingRefused` (a
        ValueError and an RhtcError) naming the variable, its value and its range.

        >>> Settings.from_env({"RHTC_LEASE": "2.5", "RHTC_LEASES": "0", "RHTC_OPEN_FILES": "0"})  # doctest: +ELLIPSIS
        Settings(lease=2.5, ..., open_files=1, leases=False, ...)
        >>> Settings.from_env({"RHTC_DISK_CACHE_SIZE": "lots"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rhtc.broker.wire.settings.SettingRefused: $RHTC_DISK_CACHE_SIZE='lots' is not a size such as 64MiB, 20GB or a number
        of bytes: it takes a size from 0 to 1PiB ...
        >>> Settings.from_env({"RHTC_LEASE": "1e17"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rhtc.broker.wire.settings.SettingRefused: $RHTC_LEASE='1e17' cannot work: it takes a number from 0.5 to 31536000 ...
        """
        environ = os.environ if environ is None else environ
        values = {}
        for f in dataclasses.fields(cls):
            name = cls.env_name(f.name)
            raw = environ.get(name)
            if raw in (None, ""):
                continue
            values[f.name] = _read(f, f"${name}", raw)
        return cls(**values)

    def overridden(self, **texts: str | None) -> "Settings":
        """These settings with each setting given here (its text as a command line has it;
        None: not given) read and checked as its variable would be; a refusal names the
        option (``--lifetime``), its value and its range.

        >>> Settings().overridden(lifetime="8h", idle_timeout=None).lifetime
        28800.0
        >>> Settings().overridden(lifetime="1000d")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rhtc.broker.wire.settings.SettingRefused: --lifetime='1000d' cannot work: it takes a duration from 0 to 365d ...
        """
        return dataclasses.replace(self, **{name: _read(SETTINGS_FIELDS[name], "--" + name.replace("_", "-"), raw)
                                            for name, raw in texts.items() if raw is not None})


def _read(f: dataclasses.Field, label: str, raw: str):
    """The value of setting ``f`` from the text ``raw`` of ``label`` (its variable, or a
    command line's option): parsed, refused when it cannot be read, is not finite or is out
    of its range, raised to its floor."""
    kind, floor, highest = f.metadata["kind"], f.metadata["minimum"], f.metadata["maximum"]
    least = f.metadata["refuse_below"] if floor is None else -math.inf
    noun = _ACCEPTS[kind].split(" such as")[0]
    takes = f": it takes {noun} from {setting_range(f.name)}" if kind in NUMERIC_KINDS else ""
    what = (f"({f.metadata['doc']}; default {_show(kind, f.default)}); "
            f"{'unset it' if label.startswith('$') else 'leave it out'} for the default")
    try:
        value = _PARSERS[kind](raw)
    except (ValueError, TypeError, OverflowError):
        raise SettingRefused(f"{label}={raw!r} is not {_ACCEPTS[kind]}{takes} {what}") from None
    if kind not in NUMERIC_KINDS:
        return value
    if not (math.isfinite(value) and least <= value <= highest):
        raise SettingRefused(f"{label}={raw!r} cannot work{takes} {what}")
    value = int(value) if kind in ("int", "size") else value
    return max(value, floor) if floor is not None else value


def _show(kind: str, x) -> str:
    """A bound or a default as one writes it in the setting's variable: 64MiB, 365d, 0.5."""
    if kind in ("bool", "str"):
        return str(int(x)) if kind == "bool" else repr(x)
    units = {"size": ("PiB", "PB", "TiB", "TB", "GiB", "GB", "MiB", "MB", "KiB", "KB"),     # largest first
             "duration": ("d", "h", "m")}.get(kind, ())
    for unit in units:
        n = UNITS[unit.upper()] if kind == "size" else SECONDS[unit]
        if x and x % n == 0:
            return f"{int(x // n)}{unit}"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def setting_range(name: str) -> str:
    """The values setting ``name`` takes, as its refusals and the docs say it: its range,
    written as its variable takes it (a floor that smaller values are raised to is said so).

    >>> setting_range("lease"), setting_range("max_result_bytes"), setting_range("lifetime")
    ('0.5 to 31536000', '1 to 1PiB', '0 to 365d')
    >>> setting_range("open_files"), setting_range("leases")
    ('1 to 100000 (less is taken as 1)', '1 or 0')
    """
    md = SETTINGS_FIELDS[name].metadata
    kind = md["kind"]
    if kind not in NUMERIC_KINDS:
        return _ACCEPTS[kind]
    low = md["refuse_below"] if md["minimum"] is None else md["minimum"]
    text = f"{_show(kind, low)} to {_show(kind, md['maximum'])}"
    return text if md["minimum"] is None else f"{text} (less is taken as {_show(kind, low)})"


class SettingRow(NamedTuple):
    """One row of the settings table: the variable, its default, its range, what it does."""

    name: str
    default: str
    range: str
    meaning: str


def settings_table() -> list[SettingRow]:
    """Every setting, in the order declared: the rows of the docs' settings page, read from
    the declarations (so the page cannot drift from the code).

    >>> rows = settings_table()
    >>> rows[0]
    SettingRow(name='RHTC_LEASE', default='5', range='0.5 to 31536000', meaning='a worker silent this long is dead (s)')
    >>> print(settings_markdown().splitlines()[2])
    | `RHTC_LEASE` | 5 | 0.5 to 31536000 | a worker silent this long is dead (s) |
    """
    return [SettingRow(Settings.env_name(f.name), _show(f.metadata["kind"], f.default), setting_range(f.name),
                       f.metadata["doc"]) for f in dataclasses.fields(Settings)]


def settings_markdown() -> str:
    """:func:`settings_table` as a Markdown table (the docs site renders it)."""
    lines = ["| variable | default | range | meaning |", "|---|---|---|---|"]
    lines += [f"| `{r.name}` | {r.default} | {r.range} | {r.meaning.replace('|', '/')} |" for r in settings_table()]
    return "\n".join(lines)


#: the fields of :class:`Settings` by name
SETTINGS_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


@functools.lru_cache(maxsize=1)
def settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings.from_env()
