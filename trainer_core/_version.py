"""trainer_core's version: the distribution's (``notebook_launcher._version``), written here as
well so that trainer_core imports nothing of the launcher; tests/docs/test_packaging.py checks they agree."""

__version__ = "0.2.0"
