"""The docstring examples of the rules' helper modules run and pass."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["theanompi.polling", "theanompi.rules.step_ledger", "theanompi.contract",
                                    "theanompi.rules.easgd_protocol", "theanompi.rules.easgd",
                                    "theanompi.session_records"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
