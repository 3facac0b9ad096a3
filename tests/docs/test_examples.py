"""Every example runs: each ``python`` block of README.md and docs/*.md, a page's blocks in
order in one namespace (the conventions and what a block can rely on: tests/docs/examples.py).
A page that maps, or whose blocks need a server (``requires: xrootd``), runs in the full suite
(mapping pages in one shared LocalCluster); the others are quick. A page that needs a pool
(``requires: condor``) runs whole in tests/docs/test_pool_examples.py."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.docs.examples import PAGES, SERVERS, blocks, needs_cluster, pool_of, requirements, unknown_requirements
from tests.pools.common import PoolUnavailable, ensure_debian_packages
from tests.pools.fixtures import pools_required


def _unavailable(what: str, reason: str):
    """A server this machine cannot provide: skip, or fail where pools are required (CI)."""
    if pools_required():
        pytest.fail(f"{what} required ($RHTC_REQUIRE_POOLS/$CI) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")


@pytest.fixture(scope="session")
def docs_xrootd():
    """What a ``requires: xrootd`` block needs: Debian's xrootd-server (installed with apt-get
    when missing, as tests/scenarios/test_nanoaod_over_xrootd.py does) and the XRootD client of the [xrootd] extra."""
    try:
        ensure_debian_packages(["xrootd-server"], ["xrootd"])
    except PoolUnavailable as err:
        _unavailable("xrootd-server", str(err))
    try:
        import fsspec_xrootd  # noqa: F401
        import XRootD.client  # noqa: F401
    except ImportError as err:
        _unavailable("the [xrootd] extra", f"{err} (pip install 'redis-htcondor[xrootd]')")


#: the fixture that provides each server a block may require
SERVER_FIXTURES = {"xrootd": "docs_xrootd"}
assert set(SERVER_FIXTURES) == set(SERVERS)


@pytest.fixture(scope="session")
def docs_cluster(docs_data):
    """The one local cluster the mapping pages share (two workers), stopped at the end. Its
    workers start in the pages' directory: ``make_chunks("data/generated/*.root")`` keeps the
    paths relative, so the workers must resolve them where the page does (as a notebook's
    own default cluster does)."""
    from rhtc import LocalCluster
    here = os.getcwd()
    os.chdir(docs_data)
    try:
        cluster = LocalCluster(n_workers=2).start()
    finally:
        os.chdir(here)
    try:
        yield cluster
    finally:
        cluster.close()


@contextlib.contextmanager
def default_for_the_page(cluster):
    """``cluster`` as the default of the page's calls while its blocks run, as a reader's own
    session default is, and not after: a test that runs next in this process (the status
    doctest, say) must not find the pages' workers on its default broker."""
    from rhtc.client import local
    with local._default_lock:
        local._active.append(cluster)
    try:
        yield
    finally:
        with local._default_lock:
            if cluster in local._active:
                local._active.remove(cluster)


def _params():
    for page in PAGES:
        if not blocks(page) or pool_of(page):
            continue                     # no python block; or the whole page runs in a pool
        heavy = needs_cluster(page) or bool(requirements(page))
        yield pytest.param(page, heavy, id=page, marks=[pytest.mark.heavy] if heavy else [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page, heavy", list(_params()))
def test_page_examples_run(page, heavy, request, docs_data, monkeypatch):
    unknown = unknown_requirements(page)
    assert not unknown, (f"{page}: {'; '.join(unknown)}: the suite provides {sorted(SERVER_FIXTURES)} here and "
                         "the pools in tests/docs/test_pool_examples.py; wire a new one in (tests/docs/)")
    for server in sorted(requirements(page)):
        request.getfixturevalue(SERVER_FIXTURES[server])
    cluster = request.getfixturevalue("docs_cluster") if needs_cluster(page) else None
    monkeypatch.chdir(docs_data)
    # what a block makes with tempfile goes in a directory removed at the end: under docs_data
    # (0755), not pytest's 0700 tmp_path, since a server that drops root (xrootd) enters it
    scratch = Path(tempfile.mkdtemp(prefix="tmp-", dir=docs_data))
    scratch.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with default_for_the_page(cluster) if cluster is not None else contextlib.nullcontext():
        for block in blocks(page):
            try:
                block.example.evaluate()
            except Exception as exc:
                raise AssertionError(f"{page}, the block at line {block.line} failed: {exc!r}\n{block.source}") from exc
