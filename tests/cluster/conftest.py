"""A real Ray cluster on loopback addresses in every test here: ``slow`` and ``cluster``."""

from folders import mark_folder

pytest_collection_modifyitems = mark_folder(__file__, "slow", "cluster")
