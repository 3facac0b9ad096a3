"""A real xrootd server for the tests that read NanoAOD over ``root://``: Debian's
xrootd-server (installed with apt-get by the fixture when missing; in CI a server that
cannot be had is a failure, elsewhere a skip), serving a world-readable temporary directory
of copies of the real samples (:data:`REAL`) and a generated file (``gen/``), started on a
free port as an unprivileged user and stopped by its pid.

A module imports the fixtures only where the ``[xrootd]`` extra is installed::

    try:
        import XRootD.client  # noqa: F401
        from tests.kits.xrootd import served, server  # noqa: F401  (fixtures)
    except ImportError:                            # the XRootD tests skip themselves
        pass

    def test_it(server):
        make_chunks(server.url("nano_d*.root"))
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from rhtc.bench.xrootd_server import XRootDServer, XRootDUnavailable
from tests.conftest import NANOAOD
from tests.pools.common import PoolUnavailable, ensure_debian_packages
from tests.pools.fixtures import pools_required

#: the real samples the server serves, by name
REAL = ["nano_dimuon.root", "nano_dy.root", "nanoAOD_2015_CMS_Open_Data_ttbar.root"]


@pytest.fixture(scope="module")
def served():
    """A world-readable temporary directory: copies of the real samples and a generated file."""
    try:
        ensure_debian_packages(["xrootd-server"], ["xrootd"])
    except PoolUnavailable as err:
        if pools_required():
            pytest.fail(f"xrootd-server required in CI but unavailable: {err}", pytrace=False)
        pytest.skip(str(err))
    from rhtc.client.synthetic import make_data
    root = Path(tempfile.mkdtemp(prefix="rhtc-served-"))
    for name in REAL:
        shutil.copy(NANOAOD / name, root / name)
    make_data(root / "gen", files=1, events=6000, compression="LZ4", progress=False)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def server(served):
    s = XRootDServer(served)
    try:
        s.start()
    except XRootDUnavailable as err:
        s.close()
        pytest.fail(str(err))
    yield s
    s.close()
