"""The settings (broker/wire/settings.py): each declared once, each numeric one with a range
whose bounds are refused or raised to, naming the variable, its range and the value.

* Declared once: ``Settings.from_env`` derives each variable's name, default and parser from
  the dataclass field, and nothing else reads ``RHTC_*``.
* Too large: every numeric ``RHTC_*`` setting has a range, too large included, and a value
  outside it is refused when the process starts. Before: ``RHTC_LEASE=1e17`` left a worker
  retrying "value is not an integer or out of range" for ever; ``RHTC_MAP_TTL=1e20`` and
  ``RHTC_CLIENT_TTL=1e300`` ended a map in a bare redis ``ResponseError``;
  ``RHTC_TOKEN_TTL=1e300`` had every task refused as "not genuine"; ``RHTC_SCAN_STEP=1e18``
  failed every sweep. The ranges are declared once, beside each setting
  (``setting(..., maximum=...)``, one bound per class of setting, its reason beside the class
  in broker/wire/settings.py), and the docs' table is read from there.
* Too small, or not a number: settings that parse but cannot work are refused. A lease of 0
  or below made a worker wait for the broker forever ("invalid expire time"), a lease of nan
  ended in a traceback. Which settings are refused below a bound and which are raised to a
  floor is declared once, beside each setting (``setting(..., refuse_below=...)`` or
  ``minimum=``); the bound above is always a refusal.

What a worker or a client does at start with such a value: tests/scenarios/test_settings_refused_at_start.py.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

import rhtc
from rhtc.broker.wire.config import SETTINGS_FIELDS, Settings
from rhtc.broker.wire.settings import (SettingRefused, parse_duration, parse_size, setting_range,
                                       settings_markdown, settings_table)
from rhtc.errors import RhtcError
from tests.kits.settings import NUMERIC
from tests.helpers import examples

ROOT = Path(rhtc.__file__).resolve().parent.parent
#: what is not a setting of a running process: where the broker is and which key signs
#: (BrokerConfig, read in broker/wire/config.py too) and what shell scripts pass to a job
NOT_SETTINGS = {"RHTC_BROKER", "RHTC_KEY", "RHTC_KEY_FILE", "RHTC_NAMESPACE", "RHTC_CONFIG", "RHTC_CACHE",
                "RHTC_PYTHON", "RHTC_CONDOR_JOB", "RHTC_WORKER_SH", "RHTC_NANOAOD",
                "RHTC_DASHBOARD_TOKEN",     # `rhtc dashboard --token`'s click envvar
                "RHTC_CHAOS_SEED", "RHTC_SOAK_SEED",    # the chaos tests' seeds (tests/scenarios/test_exactly_once_under_chaos.py)
                "RHTC_COFFEA_CONTRACT"}                 # coffea's executor tests, all cases (test_coffea_contract.py)
REFUSED_BELOW = sorted(n for n in NUMERIC if SETTINGS_FIELDS[n].metadata["refuse_below"] is not None)
RAISED_TO = sorted(n for n, f in SETTINGS_FIELDS.items() if f.metadata["minimum"] is not None)


# -- each setting declared once --------------------------------------------------------------
def _sample(field: dataclasses.Field) -> tuple[str, object]:
    """A text for the field's variable and the value it must give."""
    kind, default = field.metadata["kind"], field.default
    if kind == "bool":
        return ("0" if default else "1"), not default
    if kind == "str":
        return "/some/where", "/some/where"
    if kind == "size":
        return "3GiB", 3 * 1024 ** 3
    if kind == "duration":
        return "1.5h", 5400.0
    value = min(max(default * 3 + 7, field.metadata["minimum"] or 0), field.metadata["maximum"])
    return str(value), type(default)(value)


@pytest.mark.parametrize("name", sorted(SETTINGS_FIELDS))
def test_every_setting_is_read_from_its_variable(name):
    text, value = _sample(SETTINGS_FIELDS[name])
    env = Settings.env_name(name)
    assert getattr(Settings.from_env({env: text}), name) == value
    assert getattr(Settings.from_env({}), name) == SETTINGS_FIELDS[name].default
    assert getattr(Settings.from_env({env: ""}), name) == SETTINGS_FIELDS[name].default


@pytest.mark.parametrize("name", sorted(n for n, f in SETTINGS_FIELDS.items() if f.metadata["kind"] != "str"))
def test_a_bad_value_names_the_variable_and_what_it_takes(name):
    env = Settings.env_name(name)
    with pytest.raises(ValueError, match=rf"\${env}='n/a' is not .*default"):
        Settings.from_env({env: "n/a"})


def test_nothing_outside_the_settings_reads_an_rhtc_variable():
    """Each ``os.environ``/``getenv`` read of an ``RHTC_*`` name in the package is in
    broker/wire/config.py, or names one of the few that are not settings."""
    reads = re.compile(r"""(?:environ(?:\.get)?\s*[\[(]|getenv\s*\()\s*["'](RHTC_[A-Z0-9_]+)""")
    wrong = []
    for folder in ("broker", "worker", "client", "condor", "bench", "rhtc"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.relative_to(ROOT).as_posix() == "broker/wire/config.py":
                continue
            for m in reads.finditer(path.read_text()):
                if m.group(1) not in NOT_SETTINGS:
                    wrong.append(f"{path.relative_to(ROOT)}: {m.group(1)}")
    assert not wrong, f"read these through broker.config.settings(): {wrong}"


def test_the_readme_names_only_variables_that_exist():
    """A variable the README tells analysts to set is a setting or one of the others."""
    known = {Settings.env_name(n) for n in SETTINGS_FIELDS} | NOT_SETTINGS
    named = set(re.findall(r"RHTC_[A-Z0-9_]*[A-Z0-9]", (ROOT / "README.md").read_text()))
    assert named <= known, sorted(named - known)


# -- the range of each numeric setting, too large included ----------------------------------
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
    """(A setting with a floor, ``minimum=``, raises a value below it: test_a_value_below_a_floor_is_raised_to_it.)"""
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


@hsettings(max_examples=examples(600), deadline=None, derandomize=True)
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


@hsettings(max_examples=examples(300), deadline=None, derandomize=True)
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


# -- too small, or not a number: refused, or raised to a floor --------------------------------
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
