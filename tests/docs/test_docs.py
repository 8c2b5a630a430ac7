"""The documentation site as a reader sees it: every docstring example in the API reference is a
code block, never text run together inside quotes (``>>>`` read as Markdown's quote marker)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from paths import REPO

ROOT = REPO


def test_api_reference_examples_render_as_code(tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", "docs/mkdocs.yml", "-d", str(site)],
        cwd=ROOT,
        check=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"},
    )
    pages = sorted((site / "reference").glob("*/index.html"))
    assert len(pages) == 4
    examples = 0
    for page in pages:
        text = page.read_text()
        quoted = re.findall(r"<blockquote>(.*?)</blockquote>", text, flags=re.S)
        assert not [quote for quote in quoted if "&gt;" in quote or "&gt;&gt;&gt;" in quote], (
            f"{page.parent.name}: a docstring example rendered as quotes"
        )
        blocks = re.findall(r'<div class="highlight">(.*?)</div>', text, flags=re.S)
        examples += sum('class="gp">&gt;&gt;&gt;' in block for block in blocks)
    assert examples >= 26  # the issue counted 26 example blocks that rendered as quotes
    accelerator = (site / "reference" / "trainer_core" / "index.html").read_text()
    for method in ("prepare", "save_state", "split_between_processes", "init_trackers"):  # inherited ones too
        assert f'id="trainer_core.accelerator.Accelerator.{method}"' in accelerator, method
