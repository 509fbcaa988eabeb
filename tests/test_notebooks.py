"""The notebooks run top to bottom (tiny budgets) in the project's Python, and are committed
with their outputs stripped."""

import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_three_notebooks_are_committed_without_outputs():
    assert [p.name for p in ALL] == ["01_quickstart.ipynb", "02_sweep.ipynb",
                                     "03_async_pipeline.ipynb"]
    for path in ALL:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", [
    "01_quickstart.ipynb",
    "02_sweep.ipynb",
    "03_async_pipeline.ipynb",
])
def test_notebook_runs_top_to_bottom(name, tmp_path, monkeypatch):
    # The kernel inherits this environment: 4 forced CPU devices, the worktree on PYTHONPATH.
    monkeypatch.setenv("JRA_NOTEBOOK_STEPS", str(4 * 128 * 3))  # 3 updates
    monkeypatch.setenv("JRA_NOTEBOOK_SEEDS", "1")
    monkeypatch.setenv("JRA_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        str(NOTEBOOKS.parent), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.prefix)"))
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError with the cell's traceback on any failure
    assert nb.cells[-1].outputs[0]["text"].strip() == sys.prefix  # the project's venv
