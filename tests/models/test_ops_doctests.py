"""The docstring examples of the ops modules and of the backend run and print what they show."""

import doctest
import importlib

import pytest

MODULES = ["theanompi.backend", "theanompi.models.ops", "theanompi.models.ops._common", "theanompi.models.ops._pool_c",
           "theanompi.models.ops._batch_norm_c", "theanompi.models.ops.batch_norm", "theanompi.models.ops.pool",
           "theanompi.models.ops.conv", "theanompi.models.ops.jax_dispatch"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (see output)"
