"""Where the broker is and which key signs the session's payloads.

A *broker config* is three things: the Redis URL, the signing key (shared out of
band between the client and its workers) and the key namespace. They are looked up
in this order, the first that is set wins, field by field:

1. explicit arguments (``remote_map(..., broker="redis://...")``, ``rhtc worker --broker``);
2. environment variables ``RHTC_BROKER``, ``RHTC_KEY`` (hex) or ``RHTC_KEY_FILE``,
   ``RHTC_NAMESPACE``;
3. a JSON config file: ``$RHTC_CONFIG`` or ``~/.config/rhtc/broker.json``, mode 0600::

       {"url": "redis://:password@host:6380/0", "key": "<64 hex chars>", "namespace": "rhtc:alice"}

``rhtc broker`` writes such a file for the broker it starts, so that a second shell,
a notebook or a batch job finds it.

Example::

    >>> from rhtc.broker.config import BrokerConfig
    >>> cfg = BrokerConfig.resolve(url="redis://localhost:7777", key="00" * 32)
    >>> cfg.url, cfg.namespace.startswith("rhtc:")
    ('redis://localhost:7777', True)
"""
from __future__ import annotations

import dataclasses
import functools
import getpass
import json
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from rhtc.errors import RhtcError

ENV_URL = "RHTC_BROKER"
ENV_KEY = "RHTC_KEY"
ENV_KEY_FILE = "RHTC_KEY_FILE"
ENV_NAMESPACE = "RHTC_NAMESPACE"
ENV_CONFIG = "RHTC_CONFIG"


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}")


def validate_worker_name(name: str) -> str:
    """Return ``name`` if it can name a worker; raise ValueError saying what is wrong.

    A name is 1-128 characters from ``A-Z a-z 0-9 . _ @ : + -``, starting with a letter or
    digit (HTCondor's ``ClusterId.ProcId`` and ``host-pid`` qualify).

    >>> validate_worker_name("node12-4711")
    'node12-4711'
    >>> validate_worker_name("-x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: worker name '-x' is not valid: it must start with a letter or digit ...
    """
    if not isinstance(name, str) or not name:
        raise ValueError("worker name is empty: pass --name with 1-128 characters from "
                         "A-Z a-z 0-9 . _ @ : + -, or leave it out to use host-pid")
    if len(name) > 128:
        raise ValueError(f"worker name {name[:40]!r}... is {len(name)} characters long; use at most 128")
    if not _NAME.fullmatch(name):
        bad = sorted({c for c in name if not re.fullmatch(r"[A-Za-z0-9._@:+-]", c)})
        why = (f"it contains {''.join(bad)!r}" if bad else
               "it must start with a letter or digit")
        raise ValueError(f"worker name {name!r} is not valid: {why} (allowed: 1-128 characters from "
                         "A-Z a-z 0-9 . _ @ : + -, starting with a letter or digit)")
    return name


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


def setting(default, *, kind: str | None = None, minimum: float | None = None, env: str | None = None,
            doc: str = ""):
    """One setting of :class:`Settings`: its default, how its ``RHTC_<NAME>`` variable is
    read (``kind``: float, int, bool, str, size or duration; by default the default's type), the
    least value it takes (smaller ones are raised to it), and what it does. Everything
    :meth:`Settings.from_env` and the docs need comes from here."""
    kind = kind or type(default).__name__
    if kind not in _PARSERS:
        raise TypeError(f"setting kind {kind!r}: use one of {', '.join(_PARSERS)}")
    return dataclasses.field(default=default, metadata={"kind": kind, "minimum": minimum, "env": env, "doc": doc})


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

    lease: float = setting(5.0, doc="a worker silent this long is dead (s)")
    map_ttl: int = setting(120, doc="a map whose client stopped renewing it expires after this (s)")
    result_ttl: int = setting(600, doc="unread results of an abandoned map expire after this (s)")
    result_grace: int = setting(30, doc="a result list outlives its map by this much (s)")
    function_ttl: int = setting(600, doc="a function blob expires this long after its last map (s)")
    log_ttl: int = setting(86400, doc="the problem log expires after this (s)")
    max_attempts: int = setting(3, doc="runs of a task that killed its worker, in all")
    retry_delay: float = setting(1.0, doc="pause before a retry (s), doubling, jittered")
    open_files: int = setting(16, minimum=1, doc="files a worker keeps open, with their trees' metadata")
    leases: bool = setting(True, doc="0 only to measure what leases cost")
    steal_min_queue: int = setting(4, doc="steal from a live worker's queue this long...")
    steal_stuck_seconds: float = setting(10.0, doc="... or whose current task has run this long (s)")
    max_result_bytes: int = setting(64 * 1024 * 1024, kind="size", doc="the largest result a task may return")
    broker_patience: float = setting(300.0, doc="the client waits this long for a lost broker (s)")
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
    feed_ttl: int = setting(600, doc="... and expires this long after the last one (s)")
    xrootd_retries: int = setting(2, doc="a root:// read that fails is tried again this many times")
    disk_cache: str = setting("", doc="the node's disk tier: a node-local directory shared by the "
                                      "node's workers ('' = off)")
    disk_cache_size: int = setting(20 * 10 ** 9, kind="size", doc="the disk tier's cap for the whole node")
    disk_holds_ttl: int = setting(7 * 86400, doc="the broker forgets what a node's disk holds this long "
                                                 "after its last addition (s)")
    lifetime: float = setting(0.0, kind="duration", doc="a worker leaves on its own terms this long after "
                              "it starts: it drains (takes no new task, finishes what it runs) and exits 0 "
                              "(0 = the job's walltime where the batch system says it, else never)")
    lifetime_margin: float = setting(300.0, kind="duration", doc="the drain starts this long before the "
                                     "lifetime ends, at most a tenth of the lifetime (s)")
    lifetime_stagger: float = setting(0.1, minimum=0.0, doc="each worker's lifetime is cut by a random "
                                      "part of this fraction of it, so a pool does not leave at once")
    idle_timeout: float = setting(0.0, kind="duration", doc="a worker with no task this long leaves and "
                                  "releases its slot, unless the pool would fall under its keeper's "
                                  "minimum (0 = never)")
    merge_tasks: int = setting(64, minimum=1, doc="a worker merging a map's results (reduce=) hands its "
                               "partial in after this many tasks ...")
    merge_seconds: float = setting(10.0, minimum=0.0, doc="... or once it is this old, or when its queue "
                                   "runs dry (s) ...")
    merge_rate: float = setting(10.0, minimum=0.1, doc="... but no sooner than (workers / this) s: a pool's "
                                "partials reach the client at most this many a second")
    check_invariants: bool = setting(False, doc="1: every map checks that its task containers agree "
                                                "when it ends (the tests set it; client/invariants.py)")

    @property
    def heartbeat(self) -> float:
        """How often a worker says it is alive: a quarter of the lease, 0.2-1 s."""
        return max(0.2, min(1.0, self.lease / 4))

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
        """The settings with every ``RHTC_<NAME>`` that is set (and not empty) applied;
        a value that cannot be read raises ValueError naming the variable and what it takes.

        >>> Settings.from_env({"RHTC_LEASE": "2.5", "RHTC_LEASES": "0", "RHTC_OPEN_FILES": "0"})  # doctest: +ELLIPSIS
        Settings(lease=2.5, ..., open_files=1, leases=False, ...)
        >>> Settings.from_env({"RHTC_DISK_CACHE_SIZE": "lots"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: $RHTC_DISK_CACHE_SIZE='lots' is not a size such as 64MiB, 20GB or a number of bytes ...
        """
        environ = os.environ if environ is None else environ
        values = {}
        for f in dataclasses.fields(cls):
            name = cls.env_name(f.name)
            raw = environ.get(name)
            if raw in (None, ""):
                continue
            kind, minimum = f.metadata["kind"], f.metadata["minimum"]
            try:
                value = _PARSERS[kind](raw)
            except (ValueError, TypeError):
                raise ValueError(f"${name}={raw!r} is not {_ACCEPTS[kind]} ({f.metadata['doc']}; "
                                 f"default {f.default!r})") from None
            values[f.name] = max(value, minimum) if minimum is not None else value
        return cls(**values)


#: the fields of :class:`Settings` by name
SETTINGS_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


@functools.lru_cache(maxsize=1)
def settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings.from_env()


class BrokerNotConfigured(RuntimeError, RhtcError):
    """No broker URL was given and none is set in the environment or a config file."""


class StaleConfig(BrokerNotConfigured):
    """The config file names a broker whose owner (``rhtc broker`` or ``rhtc workers`` on
    this host, by pid) is no longer running: the URL in it leads nowhere."""


class KeyNotConfigured(RuntimeError, RhtcError):
    """A broker URL is known but no signing key is."""


def default_config_path() -> Path:
    """The config file read when ``$RHTC_CONFIG`` is not set."""
    env = os.environ.get(ENV_CONFIG)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "rhtc" / "broker.json"


def cache_dir() -> Path:
    """Where rhtc keeps what it builds once per machine (worker packs, tools).

    ``$RHTC_CACHE``, else ``$XDG_CACHE_HOME/rhtc``, else ``~/.cache/rhtc``.
    """
    env = os.environ.get("RHTC_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rhtc"


def default_namespace() -> str:
    """``rhtc:<user>``: every key the project writes lives under it."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry (containers)
        user = str(os.getuid())
    return f"rhtc:{user}"


def new_key() -> bytes:
    """A fresh random 32-byte signing key."""
    return secrets.token_bytes(32)


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _read_config_file(path: Path) -> dict:
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionError(
            f"{path} holds the broker password and signing key but is readable by others "
            f"(mode {oct(st.st_mode & 0o777)}); run `chmod 600 {path}`."
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); expected "
                         '{"url": "redis://...", "key": "<hex>", "namespace": "rhtc:you"}') from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object with keys url, key, namespace")
    return data


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # alive, another user's
        return True
    return True


def _check_owner(path: Path, data: dict) -> None:
    """Raise StaleConfig if the file's writer (pid on this host) is gone."""
    pid, host = data.get("pid"), data.get("host")
    if not isinstance(pid, int) or host != socket.gethostname() or _pid_running(pid):
        return
    by = data.get("written_by") or "another process"
    raise StaleConfig(f"{path} points at a broker that is gone (written by `{by}`, pid {pid}, no longer "
                      f"running): remove it (rm {path}) or start the broker (`rhtc broker`)")


def _decode_key(text: str, where: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError as err:
        raise ValueError(f"the signing key from {where} is not hex; make one with "
                         "`python -c 'import secrets; print(secrets.token_hex(32))'`") from err
    if len(key) < 16:
        raise ValueError(f"the signing key from {where} is {len(key)} bytes; use at least 16 (32 recommended)")
    return key


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """A resolved broker: URL, signing key and namespace."""

    url: str
    key: bytes
    namespace: str

    @classmethod
    def resolve(cls, url: str | None = None, key: bytes | str | None = None,
                namespace: str | None = None, config_file: str | os.PathLike | None = None,
                require_key: bool = True) -> "BrokerConfig":
        """Fill each field from the arguments, then the environment, then the config file.

        Raises :class:`BrokerNotConfigured` naming all three places when no URL is found.
        """
        path = Path(config_file).expanduser() if config_file else default_config_path()
        file_data = _read_config_file(path)
        if not (url or os.environ.get(ENV_URL)) and file_data.get("url"):
            _check_owner(path, file_data)
        url = url or os.environ.get(ENV_URL) or file_data.get("url")
        if not url:
            raise BrokerNotConfigured(
                "no broker configured: pass broker='redis://...' (or --broker), set "
                f"${ENV_URL}, or write {path} (`rhtc broker` does that for you)."
            )
        if isinstance(key, str):
            key = _decode_key(key, "the key argument")
        if key is None and os.environ.get(ENV_KEY):
            key = _decode_key(os.environ[ENV_KEY], f"${ENV_KEY}")
        if key is None and os.environ.get(ENV_KEY_FILE):
            kpath = Path(os.environ[ENV_KEY_FILE]).expanduser()
            if kpath.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise PermissionError(f"{kpath} holds the signing key but is readable by others; "
                                      f"run `chmod 600 {kpath}`")
            key = _decode_key(kpath.read_text(), str(kpath))
        if key is None and file_data.get("key"):
            key = _decode_key(file_data["key"], str(path))
        if key is None:
            if require_key:
                raise KeyNotConfigured(
                    f"the broker {redact(url)} is known but no signing key is: set ${ENV_KEY} "
                    f"(hex) or ${ENV_KEY_FILE}, or put \"key\" in {path}. Client and workers must "
                    "share the same key."
                )
            key = b""
        namespace = namespace or os.environ.get(ENV_NAMESPACE) or file_data.get("namespace") \
            or default_namespace()
        return cls(url=url, key=key, namespace=namespace)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "BrokerConfig":
        """The config held in one file, with the file's own checks (0600, JSON, url, hex key
        of at least 16 bytes) and nothing from the environment: what a batch job will read.

        Example::

            >>> import tempfile, os
            >>> p = BrokerConfig.resolve(url="redis://h:1", key="00" * 32).write(
            ...     os.path.join(tempfile.mkdtemp(), "b.json"))
            >>> BrokerConfig.from_file(p).url
            'redis://h:1'
        """
        path = Path(path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"no broker config at {path}: start a broker with `rhtc broker` (it writes one) "
                "or pass --config FILE; the file is what the workers read (url, key, namespace)")
        data = _read_config_file(path)
        missing = [k for k in ("url", "key") if not data.get(k)]
        if missing:
            raise ValueError(f"{path} lacks {' and '.join(missing)}: the workers need the broker URL "
                             "and the signing key in it (`rhtc broker` writes a complete one)")
        return cls(url=data["url"], key=_decode_key(data["key"], str(path)),
                   namespace=data.get("namespace") or default_namespace())

    def to_json(self) -> str:
        return json.dumps({"url": self.url, "key": self.key.hex(), "namespace": self.namespace})

    def write(self, path: str | os.PathLike, owner: str | None = None) -> Path:
        """Write this config as a 0600 JSON file that workers and other clients can read.

        ``owner`` (e.g. ``"rhtc broker"``) marks the file as belonging to this process: it
        records the pid and host, so that once the process is gone a client on this host
        is told the file is stale (:class:`StaleConfig`) instead of failing to connect.
        The owner removes the file when it stops (:meth:`remove_if_mine`).
        """
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(self.to_json())
        if owner:
            data.update(written_by=owner, pid=os.getpid(), host=socket.gethostname())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data) + "\n")
        os.chmod(path, 0o600)
        return path

    def remove_if_mine(self, path: str | os.PathLike) -> None:
        """Delete the config file at ``path`` if it still names this broker (another
        broker may have been written over it since); never raises."""
        path = Path(path).expanduser()
        try:
            if _read_config_file(path).get("url") == self.url:
                path.unlink()
        except Exception:
            pass

    def env(self) -> dict[str, str]:
        """Environment variables that make a child process resolve to this config."""
        return {ENV_URL: self.url, ENV_KEY: self.key.hex(), ENV_NAMESPACE: self.namespace}

    def __repr__(self) -> str:  # never print the password or key
        return f"BrokerConfig(url={redact(self.url)!r}, namespace={self.namespace!r})"
