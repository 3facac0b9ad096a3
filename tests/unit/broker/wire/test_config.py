"""Where the broker URL and signing key come from (broker/wire/config.py), and the errors
when they don't; sizes as the settings write them. A broker on a unix socket, for real:
tests/integration/test_unix_socket_broker.py."""
from __future__ import annotations

import json
import os

import pytest

from rhtc.broker.wire.config import BrokerConfig, BrokerNotConfigured, KeyNotConfigured, redact
from rhtc.broker.wire.config import parse_size


def test_precedence_argument_env_file(tmp_path, monkeypatch):
    f = tmp_path / "broker.json"
    BrokerConfig(url="redis://file:1", key=b"f" * 32, namespace="ns-file").write(f)
    assert oct(f.stat().st_mode & 0o777) == "0o600"
    monkeypatch.setenv("RHTC_CONFIG", str(f))
    assert BrokerConfig.resolve().url == "redis://file:1"
    assert BrokerConfig.resolve().namespace == "ns-file"
    monkeypatch.setenv("RHTC_BROKER", "redis://env:2")
    monkeypatch.setenv("RHTC_KEY", ("e" * 64))
    cfg = BrokerConfig.resolve()
    assert cfg.url == "redis://env:2" and cfg.key == bytes.fromhex("e" * 64)
    assert BrokerConfig.resolve(url="redis://arg:3").url == "redis://arg:3"


def test_error_names_all_three_places(tmp_path, monkeypatch):
    monkeypatch.setenv("RHTC_CONFIG", str(tmp_path / "missing.json"))
    with pytest.raises(BrokerNotConfigured) as info:
        BrokerConfig.resolve()
    text = str(info.value)
    assert "broker=" in text and "RHTC_BROKER" in text and "missing.json" in text


def test_missing_key_is_explained(monkeypatch):
    with pytest.raises(KeyNotConfigured, match="RHTC_KEY"):
        BrokerConfig.resolve(url="redis://somewhere:1")


def test_world_readable_config_refused(tmp_path, monkeypatch):
    f = tmp_path / "broker.json"
    f.write_text(json.dumps({"url": "redis://x:1", "key": "ab" * 32}))
    os.chmod(f, 0o644)
    monkeypatch.setenv("RHTC_CONFIG", str(f))
    with pytest.raises(PermissionError, match="chmod 600"):
        BrokerConfig.resolve()


def test_password_never_printed():
    cfg = BrokerConfig(url="redis://:s3cret@h:1/0", key=b"k" * 32, namespace="n")
    assert "s3cret" not in repr(cfg) and "s3cret" not in redact(cfg.url)


def test_sizes():
    assert parse_size("4GB") == 4_000_000_000 and parse_size("2GiB") == 2 * 1024 ** 3
    with pytest.raises(ValueError, match="4GB"):
        parse_size("lots")
