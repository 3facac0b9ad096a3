"""Settings that parse but cannot work are refused, naming the variable and what it takes
(issue 29, item 5): a lease of 0 or below made a worker wait for the broker forever
("invalid expire time"), a lease of nan ended in a traceback. Which settings are refused
below a bound and which are raised to a floor is declared once, beside each setting
(``setting(..., refuse_below=...)`` or ``minimum=``); the bound above, which is always a
refusal, in tests/test_settings_ranges.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rhtc.broker.wire.config import SETTINGS_FIELDS, Settings
from rhtc.broker.wire.settings import SettingRefused

NUMERIC = sorted(n for n, f in SETTINGS_FIELDS.items() if f.metadata["kind"] not in ("bool", "str"))
REFUSED_BELOW = sorted(n for n, f in SETTINGS_FIELDS.items() if f.metadata["refuse_below"] is not None)
RAISED_TO = sorted(n for n, f in SETTINGS_FIELDS.items() if f.metadata["minimum"] is not None)


@pytest.mark.parametrize("text", ["0", "-3", "0.1"])
def test_a_lease_that_cannot_work_is_refused_naming_the_variable(text):
    with pytest.raises(SettingRefused, match=r"\$RHTC_LEASE='.*' cannot work: it takes a number from 0\.5 to "):
        Settings.from_env({"RHTC_LEASE": text})


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999"])
def test_a_number_that_is_not_finite_is_refused_for_every_setting(name, text):
    env = Settings.env_name(name)
    with pytest.raises(SettingRefused, match=rf"\${env}='{text}' (cannot work|is not)"):
        Settings.from_env({env: text})


@pytest.mark.parametrize("name", REFUSED_BELOW)
def test_a_value_below_a_hard_bound_is_refused(name):
    field = SETTINGS_FIELDS[name]
    env, least = Settings.env_name(name), field.metadata["refuse_below"]
    below = least - 1 if field.metadata["kind"] in ("int", "size") or least >= 1 else least - 0.25
    if field.metadata["kind"] in ("size", "duration") and below < 0:
        pytest.skip(f"{env}: a size or duration cannot be written below 0")
    with pytest.raises(SettingRefused, match=rf"\${env}=.* cannot work: it takes .* from {least:g} to "):
        Settings.from_env({env: repr(below)})
    assert getattr(Settings.from_env({env: repr(least)}), name) == least     # the bound itself works


@pytest.mark.parametrize("name", RAISED_TO)
def test_a_value_below_a_floor_is_raised_to_it(name):
    field = SETTINGS_FIELDS[name]
    floor = field.metadata["minimum"]
    assert getattr(Settings.from_env({Settings.env_name(name): repr(floor - 1)}), name) == floor


def test_every_numeric_setting_declares_what_happens_below_its_bound():
    """Each bound is declared once, beside its setting; a setting without one takes any
    finite number (none such today)."""
    assert set(NUMERIC) == set(REFUSED_BELOW) | set(RAISED_TO), sorted(set(NUMERIC) - set(REFUSED_BELOW)
                                                                    - set(RAISED_TO))
    assert not set(REFUSED_BELOW) & set(RAISED_TO)


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
