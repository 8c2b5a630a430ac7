"""A real JupyterLab server and Debian's Chromium in every test here: ``slow`` (``make quick``
leaves them out) and ``browser``."""

from folders import mark_folder

pytest_collection_modifyitems = mark_folder(__file__, "slow", "browser")
