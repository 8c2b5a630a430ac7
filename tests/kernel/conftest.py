"""Real kernels launching real ranks, the tests that run again with each runtime's kernel (Colab's,
Kaggle's: ``NL_TEST_KERNEL_PYTHON``): ``runtimes``."""

from folders import mark_folder

pytest_collection_modifyitems = mark_folder(__file__, "runtimes")
