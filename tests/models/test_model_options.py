"""A ModelClass's MODEL_* options: declared once per class, merged along the class hierarchy, the contract's plain
``defaults``/``checks`` dicts still working, and every model's options refusing a bad value in one line."""

from __future__ import annotations

import sys

import pytest
from conftest import ASSETS

from theanompi.core.errors import ConfigError
from theanompi.core.options import model_option, positive_float, positive_int, predicate_parser
from theanompi.models.base import ClassifierModel
from theanompi.models.model_options import HasModelOptions

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh


class Net(HasModelOptions):
    declared_options = [model_option("width", positive_int, 16, "channels"),
                        model_option("lr", positive_float, 0.1, "learning rate")]


class Slow(Net):
    defaults = {"lr": 0.01}


class Wide(Net):
    declared_options = [model_option("groups", positive_int, 1, "groups")]
    defaults = {"width": 64}


class SlowWide(Wide, Slow):  # Wide inherits lr=0.1, Slow changes it: Slow's change holds
    pass


def test_declarations_merge_along_the_class_hierarchy():
    assert Net.defaults == {"width": 16, "lr": 0.1}
    assert Slow.defaults == {"width": 16, "lr": 0.01}
    assert list(Wide.option_table) == ["width", "lr", "groups"] and Wide.defaults["width"] == 64
    assert SlowWide.defaults == {"width": 64, "lr": 0.01, "groups": 1}
    assert SlowWide.option_table["width"].option.help == "channels" and Net.defaults["width"] == 16
    assert SlowWide.validate_options({"groups": "2"}) == {"width": 64, "lr": 0.01, "groups": 2}


def test_the_contracts_plain_dicts_keep_working():
    """``defaults = {**ClassifierModel.defaults, ...}`` and ``checks`` (docs/model-contract.md, docs/pytorch.md)."""

    class User(ClassifierModel):
        defaults = {**ClassifierModel.defaults, "hidden": 64, "tag": "x", "lr": 0.2}
        checks = {"hidden": predicate_parser(lambda v: v > 0, "a positive number"),
                  "momentum": predicate_parser(lambda v: v in (0, 0.5), "0 or 0.5")}

    class Sub(User):
        defaults = {**User.defaults, "hidden": 32}
        checks = {**User.checks}

    assert User.defaults == {**ClassifierModel.defaults, "hidden": 64, "tag": "x", "lr": 0.2}
    assert Sub.defaults["hidden"] == 32 and Sub.defaults["lr"] == 0.2
    hp = Sub.validate_options({"hidden": 8, "tag": ["any", "value"], "momentum": 0.5, "lr": "0.3"})
    assert hp == {**Sub.defaults, "hidden": 8, "tag": ["any", "value"], "momentum": 0.5, "lr": 0.3}
    with pytest.raises(ConfigError, match=r"^Sub: model option hidden='a' is not allowed; use a positive number$"):
        Sub.validate_options({"hidden": "a"})  # the user's check cannot compare 'a' > 0: still one line
    with pytest.raises(ConfigError, match=r"^Sub: model option momentum=0.9 is not allowed; use 0 or 0.5$"):
        Sub.validate_options({"momentum": 0.9})  # the user's check replaced the declared parser
    with pytest.raises(ConfigError, match=r"^Sub: unknown model option 'depth' \(cfg MODEL_DEPTH\); allowed: "):
        Sub.validate_options({"depth": 3})


def test_the_lstm_takes_no_image_options():
    from theanompi.models.zoo.lstm import LSTMClassifier

    assert "augment" not in LSTMClassifier.option_table and "num_units" in LSTMClassifier.option_table
    with pytest.raises(ConfigError, match="unknown model option 'augment'"):
        LSTMClassifier.validate_options({"augment": True})


@pytest.mark.parametrize("reference", zh.MODEL_CLASSES)
def test_every_declared_default_is_a_value_of_its_option(reference):
    cls = zh.model_class(reference)
    for opt in cls.option_table.values():
        opt.option.parse(opt.default)


@pytest.mark.parametrize("reference", zh.MODEL_CLASSES)
def test_every_option_refuses_a_bad_value_in_one_line_naming_it(reference):
    cls = zh.model_class(reference)
    assert len(cls.option_table) >= 5
    for opt in cls.option_table.values():
        bad = zh.refused_value(opt.option.parse)
        with pytest.raises(ConfigError) as info:
            cls.validate_options({opt.name: bad})
        assert str(info.value) == (f"{cls.__name__}: model option {opt.name}={bad!r} is not allowed; "
                                   f"use {opt.option.accepts()}")
