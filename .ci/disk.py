"""The environments' disk at the end of `make test`, and the most they held at once.

On CI the runtimes' environments are removed as the suite goes (``.ci/noxfile.py``,
``release_runtime``, which writes what they held just before to ``.nox/disk.tsv``): the figure a
machine needs room for is the most, not what is left at the end.

Run: python .ci/disk.py FOLDER...     (prints e.g. "2.9G now; at most 8.4G, after xla(version='2.9')")
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LOG = Path(__file__).resolve().parent.parent / ".nox" / "disk.tsv"


def human(size: int) -> str:
    """Bytes as du -h writes them.

    Examples:
        >>> human(15 * 1024**3)
        '15.0G'
        >>> human(900 * 1024**2)
        '900.0M'
    """
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{size:.1f}{unit}" if unit != "B" else f"{size}B"
        size /= 1024
    raise AssertionError("unreachable")


def disk_used(folders: list) -> int:
    """Bytes on disk under ``folders`` that exist (du counts a file hard-linked in several once)."""
    present = [str(folder) for folder in folders if Path(folder).exists()]
    if not present:
        return 0
    out = subprocess.run(["du", "-sc", "--block-size=1", *present], capture_output=True, text=True).stdout
    return int(out.splitlines()[-1].split()[0])


def main(folders: list[str]) -> None:
    now = disk_used(folders)
    noted = [line.split("\t") for line in LOG.read_text().splitlines()] if LOG.exists() else []
    most = max(noted, key=lambda row: int(row[1]), default=None)
    if most is None or int(most[1]) <= now:
        print(f"{human(now)} (the most they held)")
    else:
        print(f"{human(now)} now; at most {human(int(most[1]))}, after {most[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
