"""The suite in parallel: pytest-xdist workers (pyproject's ``addopts``: ``-n 3 --dist loadgroup``).

Every test runs alone, in whichever worker is free (its own broker, workers and temporary
directory), except the tests of one **group**, which run in one worker, one after another:

* ``pools``: every test of :data:`POOL_MODULES`, the modules that use the HTCondor pool or the
  Slurm cluster. Those are session fixtures of one process over what the machine has once (the
  chroot under ``$RHTC_POOL_CACHE`` and its lock, HTCondor's port 9618): a pool asked for in a
  second worker would wait for the first worker's session to end. In one worker they come up once.
* the modules of :data:`MODULE_GROUPS`, whose module-scoped fixture takes long to build (a wheel,
  generated data, a LocalCluster, a downloaded sdist): in one worker it is built once, not once
  per worker.

pytest-xdist's own ``loadgroup`` groups the tests marked ``xdist_group`` by appending the group
to their node ids in each worker; pytest 9.2's node ids no longer take that (pytest-xdist issue
1386), and the marks are then silently ignored. So the groups are named here, by module, and
:func:`pytest_xdist_make_scheduler` gives xdist a scheduler that keeps each group together (and
still honours an ``xdist_group`` mark where it reaches the scheduler: pytest before 9.2).
``tests/conftest.py`` refuses a test that asks for a pool outside :data:`POOL_MODULES`.
"""
from __future__ import annotations

import pytest

#: the modules (their paths under tests/) whose tests use the machine's one HTCondor pool or Slurm cluster
POOL_MODULES = frozenset({"scenarios/test_condor.py", "scenarios/test_slurm.py",
                          "scenarios/test_pool_keeper.py",
                          "docs/test_pool_examples.py"})     # the docs' pool examples
POOL_GROUP = "pools"
#: modules kept in one worker for a module-scoped fixture that is slow to build (what it builds)
MODULE_GROUPS = {
    "unit/bench/test_agcgen.py": "a ttbar file with every one of ~950 branches",
    "scenarios/test_coffea_on_workers_answers_as_coffea.py": "the nine AGC samples",
    "scenarios/test_coffea_contract.py": "a LocalCluster and coffea's sdist (downloaded into .pytest_cache)",
    "unit/client/synthetic/test_dimuon.py": "a generated NanoAOD file",
    "scenarios/test_a_warm_answer_is_the_cold_answer.py": "generated files and a node of workers",
    "scenarios/test_wheel.py": "the wheel and sdist (python -m build)",
    "scenarios/test_nanoaod_over_xrootd.py": "copies of the samples and a generated file to serve",
    "scenarios/test_xrootd_errors_and_timeouts.py": "an xrootd server",
}


def group_of(nodeid: str) -> str | None:
    """The group of a test (by its node id), or None: it runs alone."""
    module = nodeid.split("::", 1)[0].split("tests/", 1)[-1]      # its path under tests/
    if module in POOL_MODULES:
        return POOL_GROUP
    if module in MODULE_GROUPS:
        return nodeid.split("::", 1)[0]
    return None


def _scheduler_class():
    from xdist.scheduler import LoadGroupScheduling

    class ModuleGroupScheduling(LoadGroupScheduling):
        """``--dist loadgroup`` whose groups are :func:`group_of`'s, besides any ``@group``
        suffix that xdist put on a node id."""

        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            if scope != nodeid:                      # an xdist_group mark that reached us
                return scope
            return group_of(nodeid) or nodeid
    return ModuleGroupScheduling


@pytest.hookimpl(optionalhook=True)          # a hook of pytest-xdist: unknown under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None                              # --dist load, loadfile...: xdist's own
    return _scheduler_class()(config, log)
