"""No process and no kernel in any test here (seconds in all; ``make check`` runs them): ``unit``."""

from folders import mark_folder

pytest_collection_modifyitems = mark_folder(__file__, "unit")
