"""The analyst's data credentials: a grid proxy or a bearer token, found where the field's
tools look for them (the XRootD client reads the same places), and when they expire.

* **x509 proxy**: ``$X509_USER_PROXY``, else ``/tmp/x509up_u<uid>`` (what ``voms-proxy-init``
  writes); its expiry is the first certificate's ``notAfter``.
* **bearer token** (WLCG token discovery): ``$BEARER_TOKEN_FILE``, else
  ``$XDG_RUNTIME_DIR/bt_u<uid>``, else ``/tmp/bt_u<uid>``; its expiry is the JWT's ``exp``.

Nothing here reads a credential's secret part into anything that is shown, logged or sent:
:func:`describe` gives the kind, the file's name and mode, and the expiry.

    >>> import base64, json, os, tempfile, time
    >>> claims = base64.urlsafe_b64encode(json.dumps({"exp": 2000000000}).encode()).decode().rstrip("=")
    >>> path = os.path.join(tempfile.mkdtemp(), "bt_u1000")
    >>> with open(path, "w") as fh:
    ...     _ = fh.write("eyJhbGciOiJIUzI1NiJ9." + claims + ".c2ln")
    >>> [(c.kind, c.expires) for c in find_credentials({"BEARER_TOKEN_FILE": path})]
    [('bearer token', 2000000000.0)]
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import subprocess
import time
from datetime import datetime, timezone

PROXY = "x509 proxy"
TOKEN = "bearer token"
#: warn this long before a credential expires (rhtc status, the keeper)
WARN_BEFORE = 3600.0


@dataclasses.dataclass(frozen=True)
class Credential:
    kind: str                 # PROXY or TOKEN
    path: str
    expires: float = 0.0      # seconds since the epoch; 0: unknown
    mode: int = 0

    def summary(self, now: float | None = None) -> dict:
        """What may be shown: kind, file name, mode, expiry (never the content)."""
        return {"kind": self.kind, "file": os.path.basename(self.path), "mode": f"{self.mode:04o}",
                "expires": self.expires}


def _uid() -> int:
    return os.getuid()


def proxy_path(environ=None) -> str | None:
    environ = os.environ if environ is None else environ
    path = environ.get("X509_USER_PROXY") or f"/tmp/x509up_u{_uid()}"
    return path if os.path.isfile(path) else None


def token_path(environ=None) -> str | None:
    environ = os.environ if environ is None else environ
    for path in (environ.get("BEARER_TOKEN_FILE"),
                 os.path.join(environ["XDG_RUNTIME_DIR"], f"bt_u{_uid()}") if environ.get("XDG_RUNTIME_DIR") else None,
                 f"/tmp/bt_u{_uid()}"):
        if path and os.path.isfile(path):
            return path
    return None


def find_credentials(environ=None) -> list[Credential]:
    """The proxy and the token this process would use, with their expiry."""
    out = []
    for kind, path in ((PROXY, proxy_path(environ)), (TOKEN, token_path(environ))):
        if path:
            try:
                mode = os.stat(path).st_mode & 0o7777
            except OSError:
                continue
            expires = (proxy_expiry if kind == PROXY else token_expiry)(path)
            if kind == PROXY and not expires:
                expires = _job_ad_number(environ, "x509UserProxyExpiration")
            out.append(Credential(kind, path, expires, mode))
    return out


def _job_ad_number(environ, attr: str) -> float:
    """An attribute of the HTCondor job ad (HTCondor writes the proxy's expiry there)."""
    environ = os.environ if environ is None else environ
    path = environ.get("_CONDOR_JOB_AD")
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(attr + " = "):
                    return _timestamp(line.split(" = ", 1)[1])
    except (OSError, TypeError, ValueError):
        pass
    return 0.0


def _timestamp(value) -> float:
    """``value`` as seconds since the epoch, or 0 (unknown) if it is no time a clock can
    show (not a number, NaN, milliseconds, 1e300): :func:`until` must be able to say it."""
    try:
        seconds = float(value)
        datetime.fromtimestamp(seconds)
    except (TypeError, ValueError, OverflowError, OSError):
        return 0.0
    return seconds


def token_expiry(path: str) -> float:
    """A JWT's ``exp`` claim (0 if the file is not a JWT or has none, or no time)."""
    try:
        with open(path) as fh:
            parts = fh.read().strip().split(".")
        payload = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (OSError, IndexError, ValueError):
        return 0.0
    return _timestamp(claims.get("exp", 0)) if isinstance(claims, dict) else 0.0  # JSON, but no claims object


def proxy_expiry(path: str) -> float:
    """The first certificate's ``notAfter`` in a PEM proxy (0 if it cannot be read)."""
    try:
        from cryptography import x509
        with open(path, "rb") as fh:
            pem = fh.read()
        first = re.search(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", pem, re.S)
        cert = x509.load_pem_x509_certificate(first.group(0))
        after = getattr(cert, "not_valid_after_utc", None) or cert.not_valid_after.replace(tzinfo=timezone.utc)
        return after.timestamp()
    except ImportError:
        pass
    except (OSError, ValueError, AttributeError):
        return 0.0
    try:
        out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", path], capture_output=True, text=True,
                             timeout=10).stdout
        when = out.strip().partition("=")[2]
        return datetime.strptime(when, "%b %d %H:%M:%S %Y %Z").replace(tzinfo=timezone.utc).timestamp()
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0.0


def describe(credentials: list[Credential]) -> dict:
    """``{kind: summary}``, for a worker's status."""
    return {c.kind: c.summary() for c in credentials}


def until(expires: float, now: float | None = None) -> str:
    """'expires in 5 h 02 min (14:03)', 'expired 20 min ago (09:41)' or 'expiry unknown'.

    >>> until(7320, now=0)[:20]
    'expires in 2 h 02 mi'
    """
    if not expires:
        return "expiry unknown"
    now = time.time() if now is None else now
    left = expires - now
    span = abs(left)
    text = f"{int(span // 3600)} h {int(span % 3600 // 60):02d} min" if span >= 3600 else f"{int(span // 60)} min"
    clock = datetime.fromtimestamp(expires).strftime("%H:%M")
    return f"expires in {text} ({clock})" if left > 0 else f"expired {text} ago ({clock})"


def permission_note(environ=None) -> str:
    """For a 'permission denied' read: which credential this process had and when it
    expires, or that it had none."""
    found = find_credentials(environ)
    if not found:
        return ("the reader (the worker, for a chunk read on a worker) had no grid proxy (X509_USER_PROXY, "
                "/tmp/x509up_u<uid>) and no bearer token (BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u<uid>): make "
                "one where you submit (voms-proxy-init, or your token tool) and start new workers, which get it")
    return "; ".join(f"the reader had a {c.kind} ({os.path.basename(c.path)}, {until(c.expires)})" for c in found)
