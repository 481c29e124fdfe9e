import copy
import doctest
import importlib
import json
import pickle
from dataclasses import FrozenInstanceError

import pytest

from theanompi.contract import WorkerConfig
from theanompi.errors import ConfigError
from theanompi.option_checks import check_model_reference, check_worker_loss
from theanompi.options import COMMON_OPTIONS, parse_model_options
from theanompi.rules import BSP, EASGD, RULES
from theanompi.session import SessionSpec
from theanompi.session_options import SessionOptions, schema_for_names, session_options, typed_options


def _spec(rule: str, **options) -> SessionSpec:
    return SessionSpec(rule=rule, devices=["cpu0"], modelfile="theanompi.models.mlp", modelclass="MLP",
                       options=options)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_option_is_present_with_its_schema_default(rule):
    options = session_options(_spec(rule))
    schema = RULES[rule].option_schema()
    assert list(options) == [opt.name for opt in schema]
    for opt in schema:
        assert getattr(options, opt.name) == opt.default == options[opt.name]


def test_given_values_are_parsed_like_the_cfg_file():
    options = session_options(_spec("BSP", sync_type="AVG", avg_freq="3", check_finite="off", watchdog=0))
    assert (options.sync_type, options.avg_freq, options.check_finite, options.watchdog) == ("avg", 3, False, 0.0)


def test_json_round_trip_keeps_a_plain_dict():
    spec, _ = BSP.plan_session(devices="cpu0,cpu1", modelfile="theanompi.models.mlp", modelclass="MLP",
                               n_epochs=2, sync_type="avg", run_dir="/tmp/theanompi-options-test")
    typed = session_options(spec)
    assert type(typed.to_dict()) is dict and typed.to_dict() == spec.options
    reloaded = SessionSpec.from_json(spec.to_json())
    assert type(reloaded.options) is dict and session_options(reloaded) == typed
    assert json.loads(json.dumps(typed.to_dict())) == spec.options
    assert typed.n_epochs == 2 and typed.run_dir == "/tmp/theanompi-options-test"


def test_unknown_names_and_bad_values_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^EASGD: unknown option 'sync_type'; allowed: .*alpha"):
        session_options(_spec("EASGD", sync_type="avg"))
    with pytest.raises(ConfigError, match=r"^EASGD_TAU=0 is not allowed; use an integer >= 1$"):
        session_options(_spec("EASGD", tau=0))
    with pytest.raises(ConfigError, match=r"^WorkerConfig options: unknown option 'compte'"):
        typed_options({"compte": "jax"})


def test_the_object_is_frozen_and_names_a_missing_attribute():
    options = SessionOptions.from_dict({})
    with pytest.raises(FrozenInstanceError, match="cannot set 'seed'"):
        options.seed = 1
    with pytest.raises(FrozenInstanceError, match="cannot delete 'seed'"):
        del options.seed
    with pytest.raises(TypeError):
        options["seed"] = 1  # a read-only mapping
    with pytest.raises(AttributeError, match="have no option 'sede'"):
        _ = options.sede
    assert options.seed == 0 and options.get("seed") == 0 and "seed" in options and "sede" not in options


def test_copies_and_pickles_are_equal_and_still_frozen():
    options = session_options(_spec("GOSGD", p=0.5))
    for clone in (copy.copy(options), copy.deepcopy(options), pickle.loads(pickle.dumps(options))):
        assert clone == options and isinstance(clone, SessionOptions) and clone.p == 0.5
        with pytest.raises(FrozenInstanceError):
            clone.p = 0.25


def test_typed_options_finds_the_rule_of_a_worker_config_dict():
    assert typed_options(None) == SessionOptions.from_dict({})
    assert typed_options({"alpha": 0.25}).tau == 4
    assert schema_for_names(["seed"]) is COMMON_OPTIONS
    assert schema_for_names(["alpha", "tau"]) == EASGD.option_schema()
    typed = typed_options({"push_freq": 2})
    assert typed_options(typed) is typed


def test_worker_config_options_read_by_the_models():
    from theanompi.theano_mpi_contract import TheanoMPIModel

    wrapped = TheanoMPIModel(object(), WorkerConfig(rank=0, size=2, seed=0, device="cpu0",
                                                    options={"lr_scaling": "linear", "sync_type": "avg"}))
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


@pytest.mark.parametrize("module", ["options", "session_options", "option_checks", "cfg", "devices"])
def test_docstring_examples(module):
    mod = importlib.import_module(f"theanompi.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


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
