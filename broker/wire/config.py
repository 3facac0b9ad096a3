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

    >>> from rhtc.broker.wire.config import BrokerConfig
    >>> cfg = BrokerConfig.resolve(url="redis://localhost:7777", key="00" * 32)
    >>> cfg.url, cfg.namespace.startswith("rhtc:")
    ('redis://localhost:7777', True)
"""
from __future__ import annotations

import dataclasses
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
# the settings and the size and duration parsers live in broker/wire/settings.py; imported from here too
from .settings import (SETTINGS_FIELDS, SettingRefused, Settings, mib, parse_duration,  # noqa: F401
                       parse_size, setting, settings)

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
