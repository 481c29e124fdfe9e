"""The docstring examples of every module of theanompi.models.layers run and print what they show."""

import doctest
import importlib

import pytest

MODULES = ["", ".base", ".input", ".init", ".nonlinearities", ".dense", ".conv", ".pool", ".normalization",
           ".noise", ".shape", ".merge", ".recurrent", ".helper", ".objectives", ".updates", ".special", ".utils",
           ".regularization"]


@pytest.mark.parametrize("suffix", MODULES)
def test_docstring_examples(suffix):
    module = importlib.import_module("theanompi.models.layers" + suffix)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{module.__name__} has no examples"
    assert result.failed == 0, f"{result.failed} docstring example(s) of {module.__name__} failed (see output)"
