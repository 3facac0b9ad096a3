"""Shared parts of the settings tests (tests/unit/broker/wire/test_settings.py, the local
cluster's in tests/unit/client/test_local.py, and tests/scenarios/test_settings_refused_at_start.py):
the numeric settings, and a fixture that sets a variable for one test and has the process
read its settings again."""
from __future__ import annotations

import pytest

from rhtc.broker.wire.config import SETTINGS_FIELDS
from rhtc.broker.wire.settings import settings

#: every setting that holds a number (a count, a size, a duration)
NUMERIC = sorted(n for n, f in SETTINGS_FIELDS.items() if f.metadata["kind"] in ("float", "int", "size", "duration"))


@pytest.fixture
def environment(monkeypatch):
    """Set a variable for this test; the process's settings are read again, here and after."""
    def put(variable: str, text: str) -> None:
        monkeypatch.setenv(variable, text)
        settings.cache_clear()
    yield put
    monkeypatch.undo()
    settings.cache_clear()
