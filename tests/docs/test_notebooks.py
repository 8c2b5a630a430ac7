"""Every notebook in notebooks/ runs top to bottom in a real kernel, as `make demo` runs it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from notebook_runs import run_notebook
from paths import NOTEBOOKS

pytestmark = pytest.mark.slow  # every notebook run end to end (see conftest.py)


def test_quickstart_trains_to_90_percent_on_two_ranks(tmp_path):
    out = run_notebook("quickstart.ipynb", tmp_path)
    accuracy = float(re.search(r"accuracy from 2 ranks: ([0-9.]+)", out).group(1))
    kernel_accuracy = float(re.search(r"computed in the kernel: ([0-9.]+)", out).group(1))
    assert accuracy >= 0.90
    assert kernel_accuracy == accuracy
    assert "[rank 0] epoch 0:" in out and "[rank 1] rank 1 trained on 22 batches per epoch" in out
    assert "succeeded" in out


def test_the_saved_and_exported_quickstart_keeps_every_rank_log_the_charts_and_the_result(tmp_path):
    """Run as papermill, nbconvert --execute and Kaggle's "Save & Run All" do: default settings."""
    import nbformat

    run_notebook("quickstart.ipynb", tmp_path, NOTEBOOK_LAUNCHER_DISPLAY="")
    saved = nbformat.read(tmp_path / "quickstart.ipynb", as_version=4)
    cell = next(c for c in saved.cells if c.cell_type == "code" and "notebook_launcher(train" in c.source)
    displays = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
    assert len(displays) == 1  # one output per launch
    data = displays[0].data
    assert "application/vnd.jupyter.widget-view+json" not in data  # nothing that needs a live kernel
    plain, page = data["text/plain"], data["text/html"]
    for epoch in range(2):
        assert f"[rank 0] epoch {epoch}: loss" in plain
    assert "[rank 0] rank 0 trained on 22 batches per epoch" in plain
    assert "[rank 1] rank 1 trained on 22 batches per epoch" in plain
    assert "succeeded in" in plain and "rank 0 returned dict" in plain
    assert '<img class="nl-chart-image" src="data:image/svg+xml;base64,' in page
    assert 'data-key="loss"' in page and "rank 1 trained on 22 batches" in page
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert "accuracy from 2 ranks" in printed

    exported = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "html", "--stdout", str(tmp_path / "quickstart.ipynb")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, exported.stderr
    assert "rank 1 trained on 22 batches per epoch" in exported.stdout and 'data-key="loss"' in exported.stdout
    assert "epoch 1: loss" in exported.stdout


def test_mnist_notebook_falls_back_to_digits_offline_on_two_cpu_ranks(tmp_path):
    out = run_notebook("mnist_gpu.ipynb", tmp_path, MNIST_EPOCHS="1")
    assert "0 GPU(s) found: training on 2 CPU processes" in out
    assert "using scikit-learn digits upscaled to 28x28" in out
    assert re.search(r"digits test accuracy after 1 epochs on 2 processes: 0\.[5-9]", out)


def test_faults_notebook_shows_each_fault_and_resumes_exactly(tmp_path):
    out = run_notebook("faults_and_restarts.ipynb", tmp_path)
    assert "ValueError: [rank 1] batch 17 has shape (3, 5), expected (3, 4)" in out
    assert "WorkerError: rank 1 was killed by signal SIGKILL" in out
    assert "stopped>" in out and "relaunch: fine" in out
    assert "the crash: rank 1 exited with code 1 without returning a result" in out
    assert "resumed weights equal the uninterrupted run's: True" in out


@pytest.mark.parametrize("notebook", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_every_notebook_opens_with_what_it_shows(notebook):
    import nbformat

    saved = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    first = saved.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert "Run it" in first.source
    # the kernel ipykernel installs, named as it names it: JupyterLab rewrites another name as the
    # notebook opens, and the tab is then marked modified before the reader did anything
    from jupyter_client.kernelspec import KernelSpecManager

    installed = KernelSpecManager().get_kernel_spec("python3").display_name
    assert saved.metadata.kernelspec == {"display_name": installed, "language": "python", "name": "python3"}


def test_big_model_notebook_offloads_to_disk_and_matches(tmp_path):
    out = run_notebook("big_model_inference.ipynb", tmp_path)
    assert "model: 403 MB in 5 shards + model.safetensors.index.json" in out
    assert "parameters on {'meta'}" in out
    assert re.search(r"cpu: blocks\.0, blocks\.1, blocks\.2\ndisk: blocks\.3, .*head", out)
    assert "outputs equal the in-memory model's: True" in out
