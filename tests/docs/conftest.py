"""The documents (every notebook, the README's snippets, the site, the packaging): ``docs``, run by
the ``docs`` session beside the browsers instead of by ``main``."""

from folders import mark_folder

pytest_collection_modifyitems = mark_folder(__file__, "docs")
