"""Execute a notebook headlessly in a real kernel and print what its cells printed.

Usage: python notebooks/run_notebook.py notebooks/quickstart.ipynb [--save OUT.ipynb]

The notebook runs exactly as a user's would (no display setting): each launch's output is its
static form, whose text this prints ("[rank N] ..." lines and the summary). Notebooks read
small-run settings from environment variables (see each notebook's parameters cell), so CI can
run them quickly. Exits non-zero when a cell raises.
"""

from __future__ import annotations

import argparse
import os
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def run(path, save=None, timeout=900):
    """Execute the notebook, save it (to ``save``, else a temporary file), and print what the saved
    file holds: the same text a reader of the notebook sees."""
    import tempfile

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}},
    )
    try:
        client.execute()
        failed = None
    except CellExecutionError as err:
        failed = err
    with tempfile.TemporaryDirectory() as scratch:
        target = save or os.path.join(scratch, os.path.basename(path))
        nbformat.write(notebook, target)
        _print_outputs(nbformat.read(target, as_version=4))
    if failed is not None:
        print(failed, file=sys.stderr)
        return 1
    return 0


def _print_outputs(notebook):
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                target = sys.stderr if output["name"] == "stderr" else sys.stdout
                target.write(output["text"])
            elif output.get("output_type") == "error":
                print(f"{output['ename']}: {output['evalue']}")
            elif output.get("output_type") in ("execute_result", "display_data"):
                text = output.get("data", {}).get("text/plain")
                if text:
                    print(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("--save", help="write the executed notebook here")
    args = parser.parse_args()
    return run(args.notebook, args.save)


if __name__ == "__main__":
    sys.exit(main())
