"""A setting that cannot work stops the process that reads it at once, saying why: a worker
exits naming the variable (or the option) and its range, without a traceback; a client
raises :class:`SettingRefused`. And the top of each range is a value that works.

Before: a worker with ``RHTC_LEASE=1e17`` or ``RHTC_SCAN_STEP=1e18`` neither served nor
exited (it retried the broker's "value is not an integer or out of range" for ever); a
client with ``RHTC_MAP_TTL=1e20`` or ``RHTC_CLIENT_TTL=1e300`` ended its map in a bare redis
``ResponseError``; a worker with a lease of 0 or below waited for the broker forever
("invalid expire time"), one with a lease of nan ended in a traceback.

Real redis-server, real worker processes. How each value is read and refused:
tests/unit/broker/wire/test_settings.py.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rhtc.broker.wire.config import SETTINGS_FIELDS, Settings
from rhtc.broker.wire.settings import SettingRefused, setting_range, settings
from tests.kits.settings import NUMERIC, environment  # noqa: F401  (environment: a fixture)


@pytest.mark.parametrize("variable, text", [("RHTC_LEASE", "1e17"), ("RHTC_SCAN_STEP", "1e18")])
def test_a_worker_with_a_setting_above_its_range_exits_at_once_naming_it(broker, variable, text):
    """Before: the worker neither served nor exited (it retried the broker's "value is not an
    integer or out of range" for ever); the timeout makes that a failure, not a hang."""
    env = dict(os.environ, **broker.config.env(), **{variable: text})
    try:
        done = subprocess.run([sys.executable, "-m", "rhtc.worker", "--name", "absurd-1"], env=env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as err:     # (run() has killed it)
        raise AssertionError(f"a worker with {variable}={text} did not exit within 60 s:\n"
                             f"{(err.stderr or b'').decode(errors='replace')[-2000:]}") from None
    assert done.returncode != 0
    name = variable.removeprefix("RHTC_").lower()
    assert f"${variable}='{text}' cannot work: it takes" in done.stderr, done.stderr
    assert setting_range(name) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_a_worker_option_out_of_range_is_refused_naming_the_option(broker):
    """The command line's settings (``--lifetime``...) are checked as their variables are."""
    env = dict(os.environ, **broker.config.env())
    done = subprocess.run([sys.executable, "-m", "rhtc.worker", "--name", "absurd-2", "--lifetime", "1e300"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--lifetime='1e300' cannot work: it takes a duration from 0 to 365d" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("text", ["0", "-3", "nan"])
def test_a_worker_started_with_a_refused_lease_exits_at_once_saying_why(broker, text):
    env = dict(os.environ, **broker.config.env(), RHTC_LEASE=text)
    try:
        done = subprocess.run([sys.executable, "-m", "rhtc.worker", "--name", "refused-1"], env=env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as err:     # (run() has killed it)
        raise AssertionError(f"a worker with RHTC_LEASE={text} did not exit within 60 s:\n"
                             f"{(err.stderr or b'').decode(errors='replace')[-2000:]}") from None
    assert done.returncode != 0
    assert f"$RHTC_LEASE='{text}' cannot work" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("variable, text", [("RHTC_MAP_TTL", "1e20"), ("RHTC_CLIENT_TTL", "1e300")])
def test_a_client_with_a_setting_above_its_range_raises_naming_it(broker, environment, variable, text):
    """Before: a bare redis ResponseError ("value is not an integer or out of range")."""
    import rhtc
    environment(variable, text)
    with pytest.raises(SettingRefused, match=rf"\${variable}='{text}' cannot work: it takes a .* from 1 to 31536000"):
        rhtc.remote_map(abs, [1, -2], broker=broker.config, progress=False, timeout=60)


def test_every_setting_at_its_maximum_runs_a_map(broker, workers, environment):
    """The top of each range is a value the broker and its Lua scripts take: a worker and a
    client with every numeric setting at its maximum run a map and a reduction."""
    import rhtc
    tops = {Settings.env_name(n): repr(SETTINGS_FIELDS[n].metadata["maximum"]) for n in NUMERIC}
    workers.start(1, env=tops)
    for variable, text in tops.items():
        environment(variable, text)
    assert settings().lease == 365 * 86400
    assert rhtc.remote_map(abs, [1, -2, 3], broker=broker.config, progress=False, timeout=120) == [1, 2, 3]
    assert rhtc.remote_map(abs, [1, -2, 3], broker=broker.config, reduce=True, progress=False, timeout=120) == 6
