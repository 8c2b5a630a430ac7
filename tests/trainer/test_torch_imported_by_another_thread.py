"""Counting GPUs while another thread of the kernel is still importing torch.

Seen in a real JupyterLab (tests/launch/test_saved_launch.py, a fresh-clone run): another thread of
a fresh kernel (the sidebar's, which asks for the devices as the kernel starts) was importing torch
while the first launch counted GPUs on the main thread; the count read the half-imported module from
``sys.modules`` ("partially initialized module 'torch' has no attribute 'version'") and the cell
failed. The count now waits for that import, as an ``import`` statement does.
"""

from __future__ import annotations

import subprocess
import sys

RACE = """
import sys, threading
from trainer_core.hardware import nvml_gpu_count
importer = threading.Thread(target=__import__, args=("torch",))
importer.start()
while "torch" not in sys.modules:  # the other thread has begun importing torch
    pass
print("count", nvml_gpu_count(), "half-imported then:", not hasattr(sys.modules["torch"], "version"))
importer.join()
"""


def test_the_gpu_count_waits_for_a_torch_import_another_thread_began():
    run = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("count 0"), run.stdout
