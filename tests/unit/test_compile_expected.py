"""Whether a launched function compiles, read from its code (``compiling.expected``): what decides
that the kernel imports torch and Inductor once before forking, instead of every rank on its own."""

from __future__ import annotations

import functools
import sys
import types
from textwrap import dedent

from notebook_launcher.compiling import compiles


def cells(source: str) -> types.ModuleType:
    """Functions and classes defined together, as a notebook's cells define them in ``__main__``."""
    module = types.ModuleType("cells_of_a_notebook")
    sys.modules[module.__name__] = module  # a class's methods are found through its module
    exec(dedent(source), module.__dict__)
    return module


def test_a_compile_in_the_function_or_in_a_function_nested_in_it_is_found():
    found = cells("""
        import torch
        def direct():
            return torch.compile(torch.nn.Linear(2, 2))
        def nested():
            def build():
                return torch.compile(torch.nn.Linear(2, 2), mode="reduce-overhead")
            return build()
        def compiler_api():
            torch.compiler.reset()
        def plain():
            return torch.nn.Linear(2, 2)(torch.ones(2)).sum().item()
    """)
    assert compiles(found.direct, environ={})
    assert compiles(found.nested, environ={})
    assert compiles(found.compiler_api, environ={})
    assert not compiles(found.plain, environ={})


def test_a_compile_in_what_the_function_calls_from_its_own_cells_is_found():
    found = cells("""
        import torch
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = torch.compile(torch.nn.Linear(2, 2))
        def build_model():
            return Model()
        def train():
            model = build_model()
            return model.body(torch.ones(2))
        def helper_that_does_not():
            return 1
        def train_plain():
            return helper_that_does_not()
    """)
    assert compiles(found.train, environ={})  # train -> build_model -> Model.__init__
    assert not compiles(found.train_plain, environ={})


def test_accelerates_compile_options_are_found():
    found = cells("""
        def by_name(Accelerator):
            return Accelerator(dynamo_backend="inductor")
        def by_plugin(Accelerator, TorchDynamoPlugin):
            return Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="inductor"))
        def without(Accelerator):
            return Accelerator(mixed_precision="bf16")
    """)
    assert compiles(found.by_name, environ={})
    assert compiles(found.by_plugin, environ={})
    assert not compiles(found.without, environ={})
    assert compiles(found.without, environ={"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"})
    assert not compiles(found.without, environ={"ACCELERATE_DYNAMO_BACKEND": "NO"})


def test_wrapped_functions_methods_and_callables_are_read_and_anything_else_is_not():
    found = cells("""
        import torch
        def train(width):
            return torch.compile(torch.nn.Linear(width, 1))
        class Trainer:
            def __call__(self):
                return torch.compile(torch.nn.Linear(2, 1))
            def fit(self):
                return train(2)
    """)
    assert compiles(functools.partial(found.train, 2), environ={})
    assert compiles(functools.wraps(found.train)(lambda: None), environ={})  # __wrapped__ is followed
    assert compiles(found.Trainer().fit, environ={})
    assert compiles(found.Trainer(), environ={})
    assert not compiles(print, environ={})
    assert not compiles(len, environ={})


def test_a_function_naming_itself_or_a_cycle_of_functions_ends():
    found = cells("""
        def ping(n):
            return pong(n - 1) if n else 0
        def pong(n):
            return ping(n - 1) if n else 0
    """)
    assert not compiles(found.ping, environ={})


def test_a_class_whose_module_is_not_loaded_or_a_callable_that_cannot_be_read_is_a_no():
    found = cells("""
        import torch
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = helper()
        def helper():
            return torch.nn.Linear(2, 2)
        def train():
            return Model()
    """)
    del sys.modules[found.__name__]  # the class's module can no longer be found by name
    assert not compiles(found.train, environ={})

    class Unreadable:
        def __getattr__(self, name):
            raise RuntimeError("no attribute may be read")

        def __call__(self):
            return None

    assert not compiles(Unreadable(), environ={})
