"""What every page's examples run on (tests/docs/examples.py says what a block can rely on)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.docs.examples import DATA_EVENTS, DATA_FILES


@pytest.fixture(scope="session")
def docs_data():
    """A directory whose data/generated/*.root are the examples' small NanoAOD files. It is
    world-readable (0755; not under pytest's 0700 basetemp), so that a server which drops
    root (xrootd runs as ``xrootd`` or ``nobody``) can serve it, as it serves a reader's."""
    from rhtc import make_nanoaod
    home = Path(tempfile.mkdtemp(prefix="rhtc-docs-examples-"))
    home.chmod(0o755)
    try:
        make_nanoaod(home / "data" / "generated", files=DATA_FILES, events=DATA_EVENTS, compression="LZ4",
                     progress=False, workers=1)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)
