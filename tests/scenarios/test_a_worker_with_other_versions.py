"""A node with other library versions: a worker whose cloudpickle is not the client's
(a real older release from PyPI, first on its path) is named by ``rhtc status``, with
both versions, and what it cannot run comes back as a named error, not a hang."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rhtc.versions import stack_versions
from rhtc.client import RemoteError, remote_map
from tests.conftest import ROOT
from tests.helpers import square

OTHER = "3.0.0"          # an older cloudpickle than any this project installs


@pytest.fixture(scope="module")
def other_cloudpickle(tmp_path_factory):
    ours = stack_versions().get("cloudpickle")
    if ours == OTHER:
        pytest.skip(f"the client itself runs cloudpickle {OTHER}")
    target = tmp_path_factory.mktemp("cloudpickle-old")
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                          f"cloudpickle=={OTHER}"], capture_output=True, text=True, timeout=300)
    if got.returncode != 0:
        pytest.skip(f"cannot fetch cloudpickle {OTHER} from PyPI: {got.stderr.strip()[-300:]}")
    return target


def test_a_worker_with_another_cloudpickle_is_named_by_rhtc_status(broker, workers, other_cloudpickle):
    path = os.pathsep.join([str(other_cloudpickle), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    (odd,) = workers.start(1, env={"PYTHONPATH": path})
    (same,) = workers.start(1)
    status = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "status"], capture_output=True, text=True,
                            env=dict(os.environ, **broker.config.env()), cwd=str(ROOT), timeout=60)
    assert status.returncode == 0, status.stderr
    lines = [ln.strip() for ln in status.stdout.splitlines()]
    flagged = [ln for ln in lines if ln.startswith(f"{odd}:")]
    assert flagged == [f"{odd}: cloudpickle {OTHER} (this client: {stack_versions()['cloudpickle']})"], status.stdout
    assert not any(ln.startswith(f"{same}:") for ln in lines), status.stdout
    # whatever the old cloudpickle can or cannot load, every task answers: a value or a named error
    out = remote_map(square, range(20), broker=broker, progress=False, errors="return", timeout=60)
    assert len(out) == 20
    for i, v in enumerate(out):
        assert v == i * i or (isinstance(v, RemoteError) and odd in str(v)), v
