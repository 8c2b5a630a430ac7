"""Real kernels launching real ranks, the tests that run again with each runtime's kernel (Colab's,
Kaggle's: ``NL_TEST_KERNEL_PYTHON``): ``runtimes``."""

import pytest
from folders import mark_folder
from kernel_session import KernelSession

pytest_collection_modifyitems = mark_folder(__file__, "runtimes")


@pytest.fixture
def subshell_kernel():
    """A kernel of its own, the package not imported; the test skips where it has no subshells."""
    session = KernelSession()
    try:
        if not session.has_subshells():
            pytest.skip("this kernel has no subshells (ipykernel < 7)")
        yield session
    finally:
        session.shutdown()
