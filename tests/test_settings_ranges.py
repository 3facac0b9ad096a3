"""Every numeric ``RHTC_*`` setting has a range, too large included, and a value outside it is
refused when the process starts, naming the variable, its range and the value (issue: settings
of absurd size). Before: ``RHTC_LEASE=1e17`` left a worker retrying "value is not an integer
or out of range" for ever; ``RHTC_MAP_TTL=1e20`` and ``RHTC_CLIENT_TTL=1e300`` ended a map in
a bare redis ``ResponseError``; ``RHTC_TOKEN_TTL=1e300`` had every task refused as "not
genuine"; ``RHTC_SCAN_STEP=1e18`` failed every sweep. The ranges are declared once, beside
each setting (``setting(..., maximum=...)``, one bound per class of setting, its reason
beside the class in broker/wire/settings.py), and the docs' table is read from there."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import psutil
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from rhtc.broker.wire.config import SETTINGS_FIELDS, Settings
from rhtc.broker.wire.settings import (SettingRefused, parse_duration, parse_size, setting_range, settings,
                                  settings_markdown, settings_table)
from rhtc.errors import RhtcError

NUMERIC = sorted(n for n, f in SETTINGS_FIELDS.items() if f.metadata["kind"] in ("float", "int", "size", "duration"))
REFUSED_BELOW = sorted(n for n in NUMERIC if SETTINGS_FIELDS[n].metadata["refuse_below"] is not None)


def _low(name: str) -> float:
    md = SETTINGS_FIELDS[name].metadata
    return md["refuse_below"] if md["minimum"] is None else md["minimum"]


def _refused(name: str, text: str) -> SettingRefused:
    """The refusal of ``text`` for setting ``name``, checked to name the variable, the value
    and the range."""
    env = Settings.env_name(name)
    with pytest.raises(SettingRefused) as caught:
        Settings.from_env({env: text})
    message = str(caught.value)
    assert f"${env}={text!r}" in message, message
    assert f"from {setting_range(name)} (" in message, message
    assert isinstance(caught.value, RhtcError)
    return caught.value


@pytest.mark.parametrize("name", NUMERIC)
def test_the_value_just_above_the_maximum_is_refused_and_the_maximum_works(name):
    field = SETTINGS_FIELDS[name]
    top = field.metadata["maximum"]
    above = repr(top + 1) if field.metadata["kind"] in ("int", "size") else repr(math.nextafter(top, math.inf))
    _refused(name, above)
    assert getattr(Settings.from_env({Settings.env_name(name): repr(top)}), name) == top


@pytest.mark.parametrize("name", REFUSED_BELOW)
def test_the_value_just_below_the_minimum_is_refused(name):
    """(A setting with a floor, ``minimum=``, raises a value below it: tests/test_settings_refused.py.)"""
    _refused(name, repr(math.nextafter(_low(name), -math.inf)))


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"])
def test_nan_and_infinity_are_refused_with_the_range(name, text):
    _refused(name, text)


@pytest.mark.parametrize("name", NUMERIC)
def test_the_documented_default_is_inside_the_range(name):
    md = SETTINGS_FIELDS[name].metadata
    assert _low(name) <= SETTINGS_FIELDS[name].default <= md["maximum"]


@pytest.mark.parametrize("name", NUMERIC)
def test_every_numeric_setting_has_a_documented_range(name):
    """A finite range, in the table the docs render (one row per setting, read from the fields)."""
    md = SETTINGS_FIELDS[name].metadata
    assert md["maximum"] is not None and math.isfinite(md["maximum"])
    row = {r.name: r for r in settings_table()}[Settings.env_name(name)]
    assert row.range == setting_range(name) and row.meaning == md["doc"]
    assert f"| `{row.name}` | {row.default} | {row.range} |" in settings_markdown()


@hsettings(max_examples=600, deadline=None, derandomize=True)
@given(name=st.sampled_from(NUMERIC),
       number=st.floats(allow_nan=True, allow_infinity=True),
       form=st.sampled_from(["{!r}", "{:e}", "{:f}", "{:g}", " {!r} "]),
       unit=st.sampled_from(["", "", "", "KiB", "GB", "PiB", "s", "m", "h", "d"]))
def test_any_number_is_taken_within_its_range_or_refused_by_name(name, number, form, unit):
    """Whatever number (and unit) a variable holds: the setting's value lies in its range, or
    :class:`SettingRefused` names the variable and the value; never another exception."""
    env, md = Settings.env_name(name), SETTINGS_FIELDS[name].metadata
    text = form.format(number) + unit
    try:
        value = getattr(Settings.from_env({env: text}), name)
    except SettingRefused as err:
        assert f"${env}={text!r}" in str(err) and setting_range(name) in str(err), str(err)
        return
    assert math.isfinite(value) and _low(name) <= value <= md["maximum"], (text, value)
    assert isinstance(value, int if md["kind"] in ("int", "size") else float)


@hsettings(max_examples=300, deadline=None, derandomize=True)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                 st.text(alphabet="0123456789.eE+-infaKMGTPiBsmhd ", max_size=12)))
def test_the_size_and_duration_parsers_refuse_what_they_cannot_hold(value):
    """Either a finite, non-negative number (a size within a signed 64-bit byte count), or a
    ValueError that says what to write: never inf, nan, an OverflowError or a negative size."""
    for parse in (parse_size, parse_duration):
        try:
            got = parse(value)
        except ValueError as err:
            assert "cannot read" in str(err) and "use e.g." in str(err)
            continue
        assert math.isfinite(got) and got >= 0
        if parse is parse_size:
            assert isinstance(got, int) and got < 2 ** 63


# -- at process start: a worker exits saying why, a client raises ---------------------------

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


@pytest.fixture
def environment(monkeypatch):
    """Set a variable for this test; the process's settings are read again, here and after."""
    def put(variable: str, text: str) -> None:
        monkeypatch.setenv(variable, text)
        settings.cache_clear()
    yield put
    monkeypatch.undo()
    settings.cache_clear()


@pytest.mark.parametrize("variable, text", [("RHTC_MAP_TTL", "1e20"), ("RHTC_CLIENT_TTL", "1e300")])
def test_a_client_with_a_setting_above_its_range_raises_naming_it(broker, environment, variable, text):
    """Before: a bare redis ResponseError ("value is not an integer or out of range")."""
    import rhtc
    environment(variable, text)
    with pytest.raises(SettingRefused, match=rf"\${variable}='{text}' cannot work: it takes a .* from 1 to 31536000"):
        rhtc.remote_map(abs, [1, -2], broker=broker.config, progress=False, timeout=60)


def test_a_local_cluster_refuses_before_it_starts_a_broker_or_a_worker(environment):
    """Before: ``LocalCluster()`` (and ``remote_map`` without a broker, which starts the
    session's one) started a redis-server and workers, and only then met the refusal."""
    from rhtc import remote_map
    from rhtc.client.local import LocalCluster
    environment("RHTC_MAP_TTL", "1e20")
    ours = psutil.Process()
    before = {p.pid for p in ours.children(recursive=True)}
    try:
        with pytest.raises(SettingRefused, match=r"\$RHTC_MAP_TTL='1e20'"):
            LocalCluster(n_workers=1)
        with pytest.raises(SettingRefused, match=r"\$RHTC_MAP_TTL='1e20'"):
            remote_map(abs, [1], progress=False, timeout=60)
    finally:
        started = [p for p in ours.children(recursive=True) if p.pid not in before]
        for p in started:                  # (what the code before the fix left running)
            p.terminate()
        for p in psutil.wait_procs(started, timeout=5)[1]:
            p.kill()
    assert not started, [p.pid for p in started]


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
