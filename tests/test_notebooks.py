"""The notebooks run top to bottom (tiny budgets) against the installed package (the wheel,
in a fresh venv outside the repository, not the source tree), and are committed with their
outputs stripped."""

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_four_notebooks_are_committed_without_outputs():
    assert [p.name for p in ALL] == ["01_quickstart.ipynb", "02_sweep.ipynb",
                                     "03_async_pipeline.ipynb", "04_population.ipynb"]
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
    "04_population.ipynb",
])
def test_notebook_runs_top_to_bottom(name, tmp_path, monkeypatch, installed_package):
    python = installed_package[0]
    # A kernel of the fresh venv; it inherits this environment (4 forced CPU devices) but no
    # PYTHONPATH, so `import jaxrl_async` finds the wheel's copy.
    spec_dir = tmp_path / "jupyter" / "kernels" / "jra-installed"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jaxrl_async (installed)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("JRA_NOTEBOOK_STEPS", str(4 * 128 * 3))  # 3 updates
    monkeypatch.setenv("JRA_NOTEBOOK_SEEDS", "1")
    monkeypatch.setenv("JRA_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import jaxrl_async; print(jaxrl_async.__file__)"))
    client = NotebookClient(nb, timeout=300, kernel_name="jra-installed",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError with the cell's traceback on any failure
    used = Path(nb.cells[-1].outputs[0]["text"].strip())
    assert used.is_relative_to(python.parent.parent), used  # the installed package
