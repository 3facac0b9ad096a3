"""The analyst's data credentials (rhtc/credentials.py) without a process: where the bearer
token and the grid proxy are found, the expiry read from each (the token's ``exp``; a
proxy's from the HTCondor job ad when its certificate cannot be read), how an expiry is
said, and that what a worker publishes never holds the credential's content.

No openssl runs here: the tests that give a proxy empty ``PATH``, as on a node without
openssl (and, in this environment, without the ``cryptography`` package), so the proxy's
certificate cannot be read. A real proxy read by openssl, on real workers:
tests/scenarios/test_data_credentials.py.

Whatever a token file holds, the credential has an expiry that ``rhtc status`` and a
'permission denied' read can say (a hypothesis test): before, a file whose middle part
decoded to JSON that is not an object (``a.MTIz.b``: ``123``) raised ``AttributeError``,
and an ``exp`` too large for a clock (``NaN``, a time in milliseconds) made :func:`until`
raise, out of the worker's status and of the read error's explanation.
"""
from __future__ import annotations

import base64
import json
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.credentials import PROXY, TOKEN, describe, find_credentials, permission_note, token_expiry, until
from tests.kits.credentials import make_token
from tests.helpers import examples

#: hypothesis' defaults, not whatever profile another module loaded
SETTINGS = settings(settings.get_profile("default"), max_examples=examples(300), deadline=None, derandomize=True,
                    database=None)


def _jwt(payload_json: str) -> str:
    def part(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    return f"{part(json.dumps({'alg': 'none'}))}.{part(payload_json)}.c2ln"


@pytest.fixture
def no_openssl(tmp_path, monkeypatch):
    """A ``PATH`` with nothing on it: a proxy's certificate cannot be read (no child process)."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC, so that the clock in ``until``'s text is known."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# --- where they are found -------------------------------------------------------------------
def test_the_token_file_named_by_bearer_token_file_comes_before_the_runtime_dirs(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir()
    in_runtime = runtime / f"bt_u{os.getuid()}"
    make_token(in_runtime, 2_000_000_000)
    named = tmp_path / "my-token"
    make_token(named, 2_100_000_000)
    found = [c for c in find_credentials({"XDG_RUNTIME_DIR": str(runtime)}) if c.kind == TOKEN]
    assert [(c.path, c.expires) for c in found] == [(str(in_runtime), 2_000_000_000.0)]
    both = {"XDG_RUNTIME_DIR": str(runtime), "BEARER_TOKEN_FILE": str(named)}
    found = [c for c in find_credentials(both) if c.kind == TOKEN]
    assert [(c.path, c.expires) for c in found] == [(str(named), 2_100_000_000.0)]


def test_an_x509_user_proxy_that_is_not_there_is_no_proxy(tmp_path):
    """``$X509_USER_PROXY`` names the proxy: a missing file is no proxy (the default
    ``/tmp/x509up_u<uid>`` is not looked at instead, as XRootD would not)."""
    assert not [c for c in find_credentials({"X509_USER_PROXY": str(tmp_path / "gone")}) if c.kind == PROXY]


# --- a proxy's expiry: its certificate, else the job ad ---------------------------------------
JOB_AD = "ClusterId = 12\nx509userproxysubject = \"/CN=analyst\"\nx509UserProxyExpiration = {}\nProcId = 0\n"


@pytest.mark.parametrize("ad, expires", [
    (JOB_AD.format("1900000000"), 1_900_000_000.0),      # what HTCondor writes for a transferred proxy
    ("ClusterId = 12\nProcId = 0\n", 0.0),               # a job without a proxy attribute
    (JOB_AD.format("undefined"), 0.0),                   # not a number
    (JOB_AD.format("1900000000000"), 0.0),               # milliseconds: no clock can show it
    (None, 0.0),                                         # not in an HTCondor job: no job ad
])
def test_a_proxy_whose_certificate_cannot_be_read_takes_its_expiry_from_the_job_ad(tmp_path, no_openssl, ad, expires):
    proxy = tmp_path / "x509up_u1000"
    proxy.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    proxy.chmod(0o600)
    environ = {"X509_USER_PROXY": str(proxy)}
    if ad is not None:
        (tmp_path / ".job.ad").write_text(ad)
        environ["_CONDOR_JOB_AD"] = str(tmp_path / ".job.ad")
    found = [c for c in find_credentials(environ) if c.kind == PROXY]
    assert [(c.path, c.expires, c.mode) for c in found] == [(str(proxy), expires, 0o600)]


def test_a_permission_note_names_a_proxy_of_unknown_expiry(tmp_path, no_openssl):
    proxy = tmp_path / "x509up_u1000"
    proxy.write_text("no certificate here")
    note = permission_note({"X509_USER_PROXY": str(proxy)})
    assert "the reader had a x509 proxy (x509up_u1000, expiry unknown)" in note


# --- a token's expiry ---------------------------------------------------------------------------
UNREADABLE_TOKENS = {
    "opaque": "an-opaque-token-without-dots",
    "no-exp": _jwt('{"sub": "analyst"}'),
    "exp-a-word": _jwt('{"exp": "tomorrow"}'),
    "exp-null": _jwt('{"exp": null}'),
    "claims-a-number": _jwt("123"),                     # JSON, but not an object
    "claims-a-string": _jwt('"exp"'),
    "exp-nan": _jwt('{"exp": NaN}'),                    # numbers no clock can show
    "exp-1e300": _jwt('{"exp": 1e300}'),
    "exp-400-digits": _jwt('{"exp": 1' + "0" * 400 + "}"),
    "exp-milliseconds": _jwt('{"exp": 1900000000000}'),
    "not-base64": "a.%%%.b",
    "not-utf8": "a." + base64.urlsafe_b64encode(b"\xff\xfe").decode() + ".b",
}


@pytest.mark.parametrize("text", list(UNREADABLE_TOKENS.values()), ids=list(UNREADABLE_TOKENS))
def test_a_token_whose_expiry_cannot_be_read_has_an_unknown_expiry(tmp_path, text):
    token = tmp_path / "bt_u1000"
    token.write_text(text)
    assert token_expiry(str(token)) == 0.0
    found, = [c for c in find_credentials({"BEARER_TOKEN_FILE": str(token)}) if c.kind == TOKEN]
    assert found.expires == 0.0
    note = permission_note({"BEARER_TOKEN_FILE": str(token)})
    assert "the reader had a bearer token (bt_u1000, expiry unknown)" in note


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=6)


@SETTINGS
@given(payload=JSON | st.dictionaries(st.just("exp"), JSON))
def test_whatever_a_token_holds_its_expiry_can_be_said(tmp_path_factory, payload):
    """The invariant: any JSON as a token's claims (an object or not, with any ``exp``)
    gives an expiry, a number ``until`` can say (or 0, unknown); an ``exp`` that a clock can
    show is that expiry."""
    token = tmp_path_factory.mktemp("token") / "bt_u1000"
    token.write_text(_jwt(json.dumps(payload)))
    expires = token_expiry(str(token))
    assert isinstance(expires, float)
    assert until(expires, now=1_700_000_000).startswith(("expires in ", "expired ", "expiry unknown"))
    exp = payload.get("exp") if isinstance(payload, dict) else None
    if isinstance(exp, (int, float)) and not isinstance(exp, bool) and 0 < exp < 4_000_000_000:
        assert expires == float(exp)


# --- how an expiry is said, and what is shown ------------------------------------------------------
@pytest.mark.parametrize("expires, text", [
    (0.0, "expiry unknown"),
    (1_700_000_000 + 7320, "expires in 2 h 02 min (00:15)"),
    (1_700_000_000 + 1800, "expires in 30 min (22:43)"),
    (1_700_000_000 - 1200, "expired 20 min ago (21:53)"),
    (1_700_000_000 - 90_000, "expired 25 h 00 min ago (21:13)"),
])
def test_until_says_how_long_and_at_what_time(utc, expires, text):
    assert until(expires, now=1_700_000_000) == text        # 1_700_000_000 is 22:13 UTC


def test_what_a_worker_publishes_is_kind_file_mode_and_expiry_never_the_content(tmp_path):
    token = tmp_path / "bt_u1000"
    secret = make_token(token, 2_000_000_000)
    shown = describe(find_credentials({"BEARER_TOKEN_FILE": str(token), "X509_USER_PROXY": str(tmp_path / "none")}))
    assert shown == {TOKEN: {"kind": TOKEN, "file": "bt_u1000", "mode": "0600", "expires": 2_000_000_000.0}}
    assert not any(part in json.dumps(shown) for part in secret.split("."))


def test_a_permission_note_without_credentials_says_how_to_make_one(tmp_path):
    if os.path.exists(f"/tmp/bt_u{os.getuid()}"):
        pytest.skip("this machine has a bearer token in /tmp, which is always looked at")
    note = permission_note({"X509_USER_PROXY": str(tmp_path / "none"), "BEARER_TOKEN_FILE": str(tmp_path / "none"),
                            "XDG_RUNTIME_DIR": str(tmp_path)})
    assert note.startswith("the reader (the worker, for a chunk read on a worker) had no grid proxy")
    assert "voms-proxy-init" in note and "start new workers" in note
