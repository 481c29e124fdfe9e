"""The user's handles without a session: Theano-MPI's class attributes (``BSP.sync_type = 'avg'``), the refusal of
options theanompi does not have, MODEL_DATA_DIR from the environment. (Sessions started through the handles:
tests/sessions/.)"""

import pytest

import theanompi
from theanompi.core.errors import ConfigError
from theanompi.launch.plan import resolve_data_dir


@pytest.fixture
def bsp_class_attributes():
    """Theano-MPI's scripts set attributes on the class: restore them after each test."""
    saved = theanompi.BSP.sync_type, theanompi.BSP.exch_strategy
    yield theanompi.BSP
    theanompi.BSP.sync_type, theanompi.BSP.exch_strategy = saved


def test_bsp_sync_type_set_on_the_class_before_construction_takes_effect(bsp_class_attributes):
    BSP = bsp_class_attributes
    assert BSP().sync_type is None  # the default: the option's own (cdd) or the rule's choice for the ModelClass
    BSP.sync_type = "avg"
    rule = BSP()
    assert rule._options_set_on_the_class() == {"sync_type": "avg"}
    rule.sync_type = "cdd"  # on the object too, as a keyword would
    assert rule._options_set_on_the_class() == {"sync_type": "cdd"}


@pytest.mark.parametrize("attribute, message", [
    ("sync_type", "BSP_SYNC_TYPE='swap' is not allowed; use one of: cdd, avg"),
    ("exch_strategy", "BSP_EXCH_STRATEGY='swap' is not allowed; use one of: ar, ar16, nccl32, nccl16, cudampi"),
])
def test_swap_is_refused_in_one_line_naming_the_alternatives(bsp_class_attributes, tmp_path, attribute, message):
    BSP = bsp_class_attributes
    setattr(BSP, attribute, "swap")
    rule = BSP()
    with pytest.raises(ConfigError) as err:
        rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
                  run_dir=str(tmp_path / "never"))
    assert str(err.value) == message and rule.run is None and not (tmp_path / "never").exists()


def test_a_keyword_wins_over_the_class_attribute(bsp_class_attributes, tmp_path):
    BSP = bsp_class_attributes
    BSP.sync_type = "swap"
    with pytest.raises(ConfigError, match="BSP_AVG_FREQ=0"):  # sync_type='avg' given: parsed past the class's swap
        BSP().init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP", sync_type="avg",
                   avg_freq=0, run_dir=str(tmp_path / "never"))


class _ReadsDataDir:
    defaults = {"data_dir": "", "batch_size": 32}

    @classmethod
    def validate_options(cls, options):
        return options


class _NoDataDir(_ReadsDataDir):
    defaults = {"batch_size": 32}


class _TheanoMPIStyle:  # no option table: Theano-MPI's DataClasses read data_dir from the session
    pass


@pytest.mark.parametrize("model_cls, given, expected", [
    (_ReadsDataDir, {}, {"data_dir": "/env/data"}),
    (_TheanoMPIStyle, {"lr": 0.1}, {"lr": 0.1, "data_dir": "/env/data"}),
    (_ReadsDataDir, {"data_dir": "cfg/data"}, {"data_dir": "cfg/data"}),  # the cfg's (or init's) wins
    (_NoDataDir, {}, {}),  # a model without the option is not given one it would refuse
])
def test_model_data_dir_comes_from_the_environment(model_cls, given, expected):
    options, notes = resolve_data_dir(model_cls, given, {"MODEL_DATA_DIR": "/env/data"})
    assert options == expected
    assert notes == (["MODEL_DATA_DIR=/env/data from the environment"] if "data_dir" not in given
                     and "data_dir" in expected else [])
    assert resolve_data_dir(model_cls, given, {}) == (given, [])
