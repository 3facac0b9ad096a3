"""The example notebook runs headless, so it cannot rot."""
from __future__ import annotations

import os

import pytest

from tests.conftest import NANOAOD, ROOT

#: runs a notebook in a kernel that starts a local cluster: the full suite only
pytestmark = pytest.mark.heavy

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


@pytest.mark.skipif(not (NANOAOD / "nano_dy.root").exists(), reason="real NanoAOD files not found")
def test_dimuon_notebook_executes(tmp_path, monkeypatch):
    nb = nbformat.read(ROOT / "examples" / "dimuon.ipynb", as_version=4)
    monkeypatch.setenv("DIMUON_FILES", ",".join(str(NANOAOD / n) for n in ("nano_dimuon.root", "nano_dy.root")))
    monkeypatch.setenv("DIMUON_STEP", "5")          # 40 events a file: 16 chunks, so the timelines have rows
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the notebook asserts its warm run read nothing from files: on a loaded machine an idle
    # worker would steal a chunk from the other's backed-up queue (and read it from its file)
    monkeypatch.setenv("RHTC_STEAL_MIN_QUEUE", "1000000")
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "Z peak" in text and "warm:" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2                       # the two timelines, inline
    assert (tmp_path / "dimuon-warm-run.json").exists()


def test_dimuon_notebook_reads_the_quickstart_data_by_default(tmp_path, monkeypatch):
    """Without DIMUON_FILES the notebook reads what the README's Quickstart reads,
    data/generated/*.root of the project, opened from examples/ as Jupyter does."""
    from rhtc import make_nanoaod
    project = tmp_path / "project"
    (project / "examples").mkdir(parents=True)
    made = make_nanoaod(project / "data" / "generated", files=2, events=2_000, compression="LZ4",
                        progress=False, workers=1)
    nb = nbformat.read(ROOT / "examples" / "dimuon.ipynb", as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    nb.cells = [first, nbformat.v4.new_code_cell("cluster.close()\n"
                                                 "print(files, sorted({c.file for c in chunks}), len(chunks))")]
    monkeypatch.delenv("DIMUON_FILES", raising=False)
    monkeypatch.delenv("DIMUON_STEP", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(project / "examples")}})
    client.execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))
    assert text.strip() == f"{made} {made} 2", text      # both files, one 250,000-entry chunk each
