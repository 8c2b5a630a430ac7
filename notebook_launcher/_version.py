"""The package's version: the one place it is written (pyproject.toml reads it; ``trainer_core``
and the lab extension's package.json agree with it, checked by tests/docs/test_packaging.py)."""

__version__ = "0.2.0"
