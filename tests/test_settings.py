"""Every setting is declared once (issue 17): ``Settings.from_env`` derives each variable's
name, default and parser from the dataclass field, and nothing else reads ``RHTC_*``."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import rhtc
from rhtc.broker.wire.config import SETTINGS_FIELDS, Settings

ROOT = Path(rhtc.__file__).resolve().parent.parent
#: what is not a setting of a running process: where the broker is and which key signs
#: (BrokerConfig, read in broker/wire/config.py too) and what shell scripts pass to a job
NOT_SETTINGS = {"RHTC_BROKER", "RHTC_KEY", "RHTC_KEY_FILE", "RHTC_NAMESPACE", "RHTC_CONFIG", "RHTC_CACHE",
                "RHTC_PYTHON", "RHTC_CONDOR_JOB", "RHTC_WORKER_SH", "RHTC_NANOAOD",
                "RHTC_DASHBOARD_TOKEN",     # `rhtc dashboard --token`'s click envvar
                "RHTC_CHAOS_SEED", "RHTC_SOAK_SEED",    # the chaos tests' seeds (tests/test_chaos.py)
                "RHTC_COFFEA_CONTRACT"}                 # coffea's executor tests, all cases (tests/test_coffea_contract.py)


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
