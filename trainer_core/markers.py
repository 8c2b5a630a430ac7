"""Which entries of a checkpoint folder the library wrote, as its marker files say, and nothing else.

A folder the library writes holds ``COMPLETE`` (its last file: a JSON list of the entries it wrote)
or ``WRITING`` (while it is written: that list, or ``"*"`` in a ``<dir>.tmp`` that ``atomic.begin``
made, whose every entry is the library's). Markers are written under a temporary name and renamed,
so an empty one never appears; one whose text is not such a list is not the library's (a pipeline's
``COMPLETE`` sentinel, a file a person wrote).

Ownership is never inferred from file times. An empty marker (what releases before 0.2 wrote) is
the library's only in a folder that holds nothing a checkpoint never has: every entry named as the
library names its files (``model.safetensors``, ``optimizer.bin``, ``random_states_0.pkl``, ...),
and for ``COMPLETE`` its random states among them (every checkpoint has them). Anywhere else it is
someone else's file, and so is every entry beside it.

Examples:
    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("train.ipynb", "model.safetensors", "COMPLETE"):
    ...     open(os.path.join(folder, name), "w").close()
    >>> found = ownership(folder)        # an empty COMPLETE beside a notebook: not the library's
    >>> found.complete, sorted(found.theirs)
    (None, ['COMPLETE', 'model.safetensors', 'train.ipynb'])
    >>> with open(os.path.join(folder, "COMPLETE"), "w") as file:
    ...     json.dump(["model.safetensors"], file)
    >>> found = ownership(folder)
    >>> found.complete, sorted(found.ours), sorted(found.theirs)
    (['model.safetensors'], ['COMPLETE', 'model.safetensors'], ['train.ipynb'])
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

__all__ = ["COMPLETE", "WRITING", "MARKERS", "WHOLE", "Ownership", "ownership", "pending_name"]

COMPLETE = "COMPLETE"
WRITING = "WRITING"
MARKERS = (COMPLETE, WRITING)
WHOLE = "*"  # a WRITING that says the whole folder is the library's (``atomic.begin`` made it)
_LARGEST_MARKER = 1 << 20  # a longer "marker" is a person's file: it is not read
# The names the library gives the files of a checkpoint (Accelerate's layout, FSDP's and DeepSpeed's
# folders and files): an empty marker counts only in a folder of nothing else.
_CHECKPOINT_ENTRY = re.compile(
    r"(?:model|pytorch_model|pytorch_model_fsdp|optimizer|scheduler)(?:_\d+)?(?:\.safetensors|\.bin)?"
    r"|scaler\.pt|random_states_\d+\.pkl|custom_checkpoint_\d+\.pkl|notebook_launcher_state\.json"
    r"|latest|zero_to_fp32\.py"
)
_RANDOM_STATES = re.compile(r"random_states_\d+\.pkl")


def pending_name(marker: str) -> str:
    """The name a marker is written under before it is renamed into place (the library's own)."""
    return f".{marker}.writing"


_PENDING = frozenset(pending_name(marker) for marker in MARKERS)


@dataclass(frozen=True)
class Ownership:
    """What a folder's markers say.

    Attributes:
        complete: the entries a ``COMPLETE`` of the library's lists (None: no complete checkpoint of
            the library's here).
        ours: every entry the library wrote, its markers included.
        theirs: every other entry: never moved, replaced or removed.
    """

    complete: list[str] | None
    ours: frozenset[str]
    theirs: frozenset[str]

    @property
    def files(self) -> frozenset[str]:
        """The library's entries but its markers (the checkpoint's files)."""
        return self.ours - set(MARKERS) - _PENDING


def _read(path: str) -> tuple[str, list[str]]:
    """A marker's kind ("absent", "empty", "list", "whole" or "foreign") and the names it lists."""
    try:
        if os.path.getsize(path) > _LARGEST_MARKER:
            return "foreign", []
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (FileNotFoundError, NotADirectoryError):
        return "absent", []
    except (OSError, UnicodeDecodeError):  # a folder named COMPLETE, unreadable bytes
        return "foreign", []
    if not text.strip():
        return "empty", []
    try:
        value = json.loads(text)
    except ValueError:
        return "foreign", []
    if value == WHOLE:
        return "whole", []
    if isinstance(value, list) and all(_plain_name(name) for name in value):
        return "list", value
    return "foreign", []


def _plain_name(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..", *MARKERS) and "/" not in name


def ownership(directory: str) -> Ownership:
    """Split ``directory``'s entries into the library's and everyone else's (see the module docstring).

    Raises:
        NotADirectoryError / FileNotFoundError: ``directory`` is not a folder.
    """
    entries = set(os.listdir(directory))
    complete_kind, complete_names = _read(os.path.join(directory, COMPLETE))
    writing_kind, writing_names = _read(os.path.join(directory, WRITING))
    others = entries - set(MARKERS) - _PENDING
    shaped = all(_CHECKPOINT_ENTRY.fullmatch(name) for name in others)
    ours = entries & _PENDING
    complete: list[str] | None = None
    if writing_kind == "whole" or (writing_kind == "empty" and shaped):  # a .tmp that begin made
        ours = set(entries)
    if complete_kind == "list":
        ours |= {COMPLETE, *(entries & set(complete_names))}
        complete = list(complete_names)
    elif complete_kind == "empty" and shaped and any(_RANDOM_STATES.fullmatch(name) for name in others):
        ours |= {COMPLETE, *others}
        complete = sorted(others)
    if writing_kind == "list":
        ours |= {WRITING, *(entries & set(writing_names))}
    return Ownership(complete, frozenset(ours), frozenset(entries - ours))
