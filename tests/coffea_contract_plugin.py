"""A pytest plugin for coffea's own test suite: its executor tests run with rhtc's
``RedisExecutor`` where they run ``FuturesExecutor``, beside ``IterativeExecutor``.

tests/scenarios/test_coffea_contract.py copies this file next to the unpacked source distribution
of the installed coffea and runs ``pytest -p rhtc_contract_plugin
tests/test_local_executors.py`` there, in a subprocess whose environment names the
test's broker (``RHTC_BROKER``, ``RHTC_KEY``, ``RHTC_NAMESPACE``), whose workers it
started. Every test of that file parametrized over ``executor`` gets
``[IterativeExecutor, RedisExecutor]`` instead of ``[IterativeExecutor, FuturesExecutor]``
(so its ids read ``...-RedisExecutor-...``); ``RedisExecutor()`` with no ``broker=`` runs
on the broker of the environment, and ``copy()`` (coffea's Runner copies its executor)
keeps it. The tests that exercise ``FuturesExecutor`` itself (its merge pools) are left
as coffea wrote them.

Nothing here changes what the tests check: only which executor class they are given.
"""
from __future__ import annotations

import os

import pytest

REQUIRED_ENV = ("RHTC_BROKER", "RHTC_KEY")
#: the executor class of coffea's parametrizations that RedisExecutor replaces
REPLACED = "FuturesExecutor"
_rewritten: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    missing = [name for name in REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        raise pytest.UsageError(
            f"rhtc_contract_plugin: {', '.join(missing)} not set. This plugin runs coffea's executor tests on "
            "a running rhtc broker and its workers: run it through tests/scenarios/test_coffea_contract.py, which "
            "starts them and sets the environment.")


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Before pytest expands the ``parametrize`` marks, swap FuturesExecutor for ours in
    the ``executor`` one."""
    if "executor" not in metafunc.fixturenames:
        return
    from coffea import processor
    from rhtc.coffea import RedisExecutor

    marks = metafunc.definition.own_markers
    for i, mark in enumerate(marks):
        if mark.name != "parametrize" or not mark.args or mark.args[0] != "executor":
            continue
        values = list(mark.args[1])
        if getattr(processor, REPLACED) not in values:
            continue
        values = [RedisExecutor if v is getattr(processor, REPLACED) else v for v in values]
        marks[i] = pytest.mark.parametrize(mark.args[0], values, *mark.args[2:], **mark.kwargs).mark
        _rewritten.append(metafunc.definition.name)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _rewritten:
        raise pytest.UsageError(
            f"rhtc_contract_plugin: no test of {session.config.args} is parametrized over 'executor' with "
            f"coffea's {REPLACED}: this coffea's test file is not the one the plugin knows. Read its "
            "executor tests and update tests/coffea_contract_plugin.py to give them RedisExecutor.")


def pytest_report_header(config: pytest.Config) -> str:
    return (f"rhtc_contract_plugin: coffea's {REPLACED} replaced by rhtc.coffea.RedisExecutor, "
            f"on namespace {os.environ.get('RHTC_NAMESPACE', '?')} of the broker in RHTC_BROKER")
