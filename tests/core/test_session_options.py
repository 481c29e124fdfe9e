import copy
import json
import pickle
from dataclasses import FrozenInstanceError

import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.option_checks import check_lr_schedule, check_model_reference, check_worker_loss
from theanompi.core.options import parse_model_options
from theanompi.core.session_options import (
    OPTIONS_BY_RULE,
    ASGDOptions,
    BSPOptions,
    EASGDOptions,
    GOSGDOptions,
    SessionOptions,
    options_of,
    rule_name,
)
from theanompi.launch.plan import SessionRequest, plan_session
from theanompi.models.contract import WorkerConfig
from theanompi.rules import BSP, RULES
from theanompi.session.spec import SessionSpec


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_option_is_present_with_its_default(rule):
    options_class = RULES[rule].options_class
    assert options_class is OPTIONS_BY_RULE[rule] and options_class.rule == rule
    defaults = options_class.defaults()
    schema = options_class.schema()
    assert list(defaults.to_dict()) == list(schema)
    assert list(schema)[:len(SessionOptions.schema())] == list(SessionOptions.schema())  # common options first
    assert options_class.parse({}) == defaults


def test_given_values_are_parsed_like_the_cfg_file():
    options = BSPOptions.parse({"sync_type": "AVG", "avg_freq": "3", "check_finite": "off", "watchdog": 0})
    assert (options.sync_type, options.avg_freq, options.check_finite, options.watchdog) == ("avg", 3, False, 0.0)
    cfg = BSPOptions.from_cfg({"BSP_SYNC_TYPE": "AVG", "BSP_AVG_FREQ": "3", "CHECK_FINITE": "off", "WATCHDOG": "0"})
    assert cfg == options


def test_cfg_keys_are_unique_across_every_rule():
    keys = [key for cls in OPTIONS_BY_RULE.values() for key in cls.cfg_keys()[len(SessionOptions.schema()):]]
    assert len(keys) == len(set(keys))
    for rule, cls in OPTIONS_BY_RULE.items():
        assert all(key.startswith(f"{rule}_") for key in cls.cfg_keys()[len(SessionOptions.schema()):])


def test_the_spec_carries_the_typed_options_through_json():
    request = SessionRequest.from_keywords(BSP, "cpu0,cpu1", "theanompi.models.mlp", "MLP", n_epochs=2,
                                           sync_type="avg", run_dir="/tmp/theanompi-options-test")
    spec, _ = plan_session(request)
    assert isinstance(spec.options, BSPOptions) and spec.options.n_epochs == 2
    assert spec.options.run_dir == "/tmp/theanompi-options-test"
    assert spec.options.checkpoint_dir == "/tmp/theanompi-options-test/checkpoints"
    reloaded = SessionSpec.from_json(spec.to_json())
    assert reloaded == spec and type(reloaded.options) is BSPOptions
    assert json.loads(spec.to_json())["options"] == spec.options.to_dict()


def test_unknown_names_and_bad_values_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^EASGD: unknown option 'sync_type' \(BSP's\); allowed: .*alpha"):
        EASGDOptions.parse({"sync_type": "avg"})
    with pytest.raises(ConfigError, match=r"^EASGD_TAU=0 is not allowed; use an integer >= 1$"):
        EASGDOptions.parse({"tau": 0})
    with pytest.raises(ConfigError, match=r"^session: unknown option 'compte'; allowed: "):
        SessionOptions.parse({"compte": "jax"})
    with pytest.raises(ConfigError, match=r"^EASGD options have no option 'p'$"):
        EASGDOptions.from_dict({"p": 0.5})


def test_the_object_is_frozen_and_typed():
    options = SessionOptions()
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'seed'"):
        options.seed = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _ = options.sede  # type: ignore[attr-defined]
    changed = options.replace(seed=3)
    assert changed.seed == 3 and options.seed == 0 and type(changed) is SessionOptions


def test_copies_and_pickles_are_equal_and_still_frozen():
    options = GOSGDOptions.parse({"p": 0.5})
    for clone in (copy.copy(options), copy.deepcopy(options), pickle.loads(pickle.dumps(options))):
        assert clone == options and isinstance(clone, GOSGDOptions) and clone.p == 0.5
        with pytest.raises(FrozenInstanceError):
            clone.p = 0.25  # type: ignore[misc]


def test_rule_names_are_checked_once_with_the_allowed_ones():
    assert options_of("asgd") is ASGDOptions and rule_name(" bsp ") == "BSP"
    with pytest.raises(ConfigError, match=r"^RULE='XYZ' is not allowed; use one of: BSP, EASGD, GOSGD, ASGD$"):
        rule_name("XYZ")


def test_worker_config_options_read_by_the_models():
    from theanompi.models.theano_mpi_adapter import TheanoMPIModel

    wrapped = TheanoMPIModel(object(), WorkerConfig(rank=0, size=2, seed=0, device="cpu0",
                                                    options=BSPOptions(lr_scaling="linear", sync_type="avg")))
    assert (wrapped.options.lr_scaling, wrapped.options.warmup_epochs, wrapped.options.resume) == ("linear", 0.0, None)
    bare = TheanoMPIModel(object(), WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    assert bare.options.lr_scaling == "none"


@pytest.mark.parametrize("flag, expected", [("-sync=true", True), ("-sync=1", True), ("-sync=FALSE", False),
                                            ("-sync=0", False)])
def test_multiverso_sync_flag_is_parsed_as_a_boolean(flag, expected):
    from theanompi.multiverso import api

    assert api.parse_flags([flag]) == {"sync": expected}


@pytest.mark.parametrize("call, message", [
    (lambda api: api.parse_flags(["-sync=maybe"]),
     r"^Multiverso flag '-sync=maybe' is not allowed; use true or false$"),
    (lambda api: api.init(sync="sometimes"), r"^sync='sometimes' is not allowed; use true or false$"),
    (lambda api: api.init(lr=0), r"^lr=0 is not allowed; use a finite number > 0$"),
    (lambda api: api.init(momentum=1.5), r"^momentum=1.5 is not allowed; use a number in \[0, 1\)$"),
    (lambda api: api.init(updater="nesterov"), r"^updater='nesterov' is not allowed; use one of: add, "),
])
def test_multiverso_bad_arguments_are_refused_before_mpi_starts(call, message):
    from theanompi.multiverso import api

    with pytest.raises(ValueError, match=message):
        call(api)
    assert api._state is None


@pytest.mark.parametrize("call, message", [
    (lambda: check_model_reference("", "MLP"), r"^MODELFILE='' must name a module or a \.py file$"),
    (lambda: check_model_reference("m", None), r"^MODELCLASS=None must be a class name$"),
    (lambda: check_worker_loss("BSP", False, "continue"), r"^ON_WORKER_LOSS=continue: RULE=BSP cannot carry on"),
    (lambda: parse_model_options([1]), r"^model_options=\[1\] must be a dict$"),
    (lambda: parse_model_options({"9x": 1}), r"^model option name '9x' is not an identifier$"),
])
def test_checks_raise_one_config_error_line(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_checks_pass_good_values_unchanged():
    check_worker_loss("EASGD", True, "continue")
    check_worker_loss("BSP", False, "abort")
    given = {"LR": 0.1}
    assert parse_model_options(given) == {"lr": 0.1} and given == {"LR": 0.1}


def test_asgd_warms_up_by_default_and_warmup_epochs_0_turns_it_off() -> None:
    asgd = ASGDOptions()
    assert (asgd.warmup_epochs, asgd.warmup_start_factor) == (3.0, 0.125)
    assert all((options_of(rule)().warmup_epochs, options_of(rule)().warmup_start_factor) == (0.0, 1.0)
               for rule in ("BSP", "EASGD", "GOSGD"))
    off = ASGDOptions.from_cfg({"WARMUP_EPOCHS": "0"})
    check_lr_schedule(off)  # ASGD's own start factor without epochs: no warm-up, no error
    assert off.warmup_epochs == 0.0
    with pytest.raises(ConfigError, match=r"^WARMUP_START_FACTOR=0.5 needs WARMUP_EPOCHS"):
        check_lr_schedule(ASGDOptions.from_cfg({"WARMUP_EPOCHS": "0", "WARMUP_START_FACTOR": "0.5"}))
    assert ASGDOptions.schema()["warmup_epochs"] is SessionOptions.schema()["warmup_epochs"]  # one declaration
