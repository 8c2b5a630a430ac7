"""A notebook exported through the Jupyter server shows each launch as its next save would.

A notebook saved mid-launch keeps the form the launch had then ("running … before the launch
ended"). Its next save replaces it with the latest snapshot (``saved_outputs.keep_static_forms``):
the final form once the launch ended, or "ended with its kernel" once that kernel is gone. An
export read the file as it was, so a notebook whose kernel was killed mid-run exported as "running"
until it was saved again. ``LaunchForms``, an nbconvert preprocessor that the server extension adds
to the server's exporters (File › Save and Export Notebook As, ``/nbconvert/<format>/<path>``),
applies the same step to the exported copy; the file itself is left as it is. ``jupyter nbconvert``
on the command line runs without the server and its snapshots, and exports the file as saved.

Example (what ``server_extension`` does at load)::

    export_with_launch_forms(serverapp.web_app.settings["config"])
"""

from __future__ import annotations

import os
from typing import Any

from nbconvert.preprocessors import Preprocessor

from .saved_outputs import SNAPSHOTS_ENV, keep_static_forms

__all__ = ["LaunchForms", "export_with_launch_forms"]

PREPROCESSOR = f"{__name__}.LaunchForms"


class LaunchForms(Preprocessor):
    """Each launch output of the exported copy as its next save would write it."""

    def preprocess(self, nb: Any, resources: Any) -> tuple[Any, Any]:
        folder = os.environ.get(SNAPSHOTS_ENV)
        if folder:
            keep_static_forms(nb, folder)
        return nb, resources


def export_with_launch_forms(config: Any) -> list[str]:
    """Add ``LaunchForms`` to the exporters' preprocessors in ``config`` (a server's traitlets
    ``Config``), after any already there, once; returns the list.

    Example:
        >>> from traitlets.config import Config
        >>> export_with_launch_forms(Config())
        ['notebook_launcher.frontend.export_forms.LaunchForms']
    """
    exporter = config.Exporter
    preprocessors = list(exporter.preprocessors) if "preprocessors" in exporter else []
    if PREPROCESSOR not in preprocessors:
        preprocessors.append(PREPROCESSOR)
    exporter.preprocessors = preprocessors
    return preprocessors
