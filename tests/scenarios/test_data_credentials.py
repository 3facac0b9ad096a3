"""The analyst's data credentials (rhtc/credentials.py): found where the field's tools look,
their expiry read, shown by `rhtc status` with a warning an hour before, named in a
'permission denied' read error; and their contents never shown. Real broker, real workers."""
from __future__ import annotations

import json
import time

from rhtc import remote_map
from rhtc.broker.storage import Storage
from rhtc.client.ops.status import render_status
from tests.kits.credentials import make_proxy, make_token


def explain_denied(_):
    from rhtc.client.data.xrootd import explain
    return explain("root://eos.example//store/a.root", "[ERROR] Server responded with an error: [3010] permission denied")[1]


def test_workers_show_their_credentials_and_status_warns_before_expiry(broker, workers, tmp_path):
    token = tmp_path / "bt_u1000"
    secret = make_token(token, time.time() + 1800)                     # expires in 30 min: warn
    proxy = tmp_path / "x509up_u1000"
    make_proxy(proxy)
    name, = workers.start(1, env={"BEARER_TOKEN_FILE": str(token), "X509_USER_PROXY": str(proxy)})
    s = Storage(broker.config)
    try:
        status = next(w for w in s.pool.worker_statuses() if w.name == name)
        assert set(status.credential) == {"bearer token", "x509 proxy"}
        assert status.credential["bearer token"]["mode"] == "0600"
        assert abs(status.credential["x509 proxy"]["expires"] - (time.time() + 86400)) < 600
        text = render_status(s)
        assert "credentials: bearer token (bt_u1000, mode 0600) on 1 worker(s): expires in 29 min" in text \
            or "credentials: bearer token (bt_u1000, mode 0600) on 1 worker(s): expires in 30 min" in text, text
        assert "WARNING: the bearer token expires in" in text
        assert "WARNING: the x509 proxy" not in text
        assert secret not in text and secret not in json.dumps(status.credential)
        # a read refused by the server says which credential the worker had, and when it expires
        message, = remote_map(explain_denied, [0], broker=broker.config, progress=False)
        assert "permission denied" in message and "the reader had a bearer token (bt_u1000, expires in" in message
        assert secret not in message
    finally:
        s.close()
    assert secret not in workers.log(name)


def test_a_worker_without_credentials_says_so_when_a_read_is_refused(broker, workers, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/nonexistent")
    workers.start(1, env={"X509_USER_PROXY": "/nonexistent/x509", "BEARER_TOKEN_FILE": "/nonexistent/bt"})
    message, = remote_map(explain_denied, [0], broker=broker.config, progress=False)
    assert "the reader (the worker, for a chunk read on a worker) had no grid proxy" in message
