"""A rank's rich display as the notebook format holds it, whichever side made it.

Examples:
    >>> as_text(b"\\x89PNG")
    'iVBORw=='
"""

from __future__ import annotations

import base64
from typing import Any

__all__ = ["as_text"]


def as_text(value: Any) -> str:
    """A mime bundle's value as the notebook format holds it: binary data (IPython's formatters give
    a PNG as bytes) base64-encoded, as the kernel's own session encodes it; anything else as text.

    Examples:
        >>> as_text(b"\\x89PNG"), as_text("<b>hi</b>")
        ('iVBORw==', '<b>hi</b>')
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value if isinstance(value, str) else str(value)
