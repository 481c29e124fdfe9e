"""EASGD without ranks: the launch plan, its options and their checks, the grants of steps.
(Sessions under a real mpiexec: tests/sessions/test_easgd.py.)"""

import pytest
from conftest import plan

import theanompi
from theanompi.core.devices import parse_devices
from theanompi.core.errors import ConfigError
from theanompi.rules.easgd import EASGD, grant_steps


def test_first_device_is_the_servers_as_in_theano_mpi():
    ranks = EASGD.launch_ranks(parse_devices("cpu0,cpu1,cpu2"), {})
    assert [(r.role, str(r.device)) for r in ranks] == [("server", "cpu0"), ("worker", "cpu1"), ("worker", "cpu2")]
    remote = EASGD.launch_ranks(parse_devices("node1:cpu2,cpu3;node2:cpu0"), {})
    assert [(r.role, str(r.device)) for r in remote] == [
        ("server", "node1:cpu2"), ("worker", "node1:cpu3"), ("worker", "node2:cpu0")]
    gpus = EASGD.launch_ranks(parse_devices("cuda0,cuda1,cuda2"), {})  # the server computes on its host's CPU
    assert [(r.role, str(r.device)) for r in gpus] == [("server", "cpu0"), ("worker", "cuda1"), ("worker", "cuda2")]


@pytest.mark.parametrize("devices", ["cpu0", ["cpu3"]])
def test_a_single_device_is_refused_in_one_line(tmp_path, devices):
    rule = theanompi.EASGD()
    with pytest.raises(ConfigError) as err:
        rule.init(devices=devices, modelfile="theanompi.models.mlp", modelclass="MLP", run_dir=str(tmp_path / "no"))
    message = str(err.value)
    assert "EASGD needs a server device and at least one worker device (the first device is the server's" in message
    assert "\n" not in message and rule.run is None and not (tmp_path / "no").exists()


def test_plan_session_defaults_and_registration(tmp_path):
    import theanompi
    from theanompi.rules import get_rule

    assert theanompi.EASGD.rule is EASGD and get_rule("easgd") is EASGD
    spec, ranks = plan(EASGD, ["cpu0", "cpu1", "cpu2"], "theanompi.models.mlp", "MLP", cwd=str(tmp_path))
    assert len(ranks) == 3 and [r["role"] for r in spec.ranks] == ["server", "worker", "worker"]
    assert spec.options.alpha == 0.5 and spec.options.tau == 4
    spec, _ = plan(EASGD, "cpu0,cpu1", "theanompi.models.mlp", "MLP", cwd=str(tmp_path), alpha="1", tau="7")
    assert spec.options.alpha == 1.0 and spec.options.tau == 7


@pytest.mark.parametrize("options, message", [
    ({"alpha": 0}, "EASGD_ALPHA=0 is not allowed; use a number in (0, 1]"),
    ({"alpha": 1.5}, "EASGD_ALPHA=1.5 is not allowed; use a number in (0, 1]"),
    ({"alpha": "half"}, "EASGD_ALPHA='half' is not allowed"),
    ({"tau": 0}, "EASGD_TAU=0 is not allowed; use an integer >= 1"),
    ({"avg_freq": 2}, "EASGD: unknown option 'avg_freq'"),
])
def test_bad_options_via_init_raise_config_error(tmp_path, options, message):
    rule = theanompi.EASGD()
    with pytest.raises(ConfigError) as err:
        rule.init(devices=["cpu0", "cpu1", "cpu2"], modelfile="theanompi.models.mlp", modelclass="MLP",
                  run_dir=str(tmp_path / "never"), **options)
    assert message in str(err.value)
    assert rule.run is None and not (tmp_path / "never").exists()


def test_grants_add_up_to_the_target_with_a_partial_last_block():
    assigned, grants = 0, []
    while (g := grant_steps(4, 10, assigned)):
        grants.append(g)
        assigned += g
    assert grants == [4, 4, 2] and grant_steps(4, 10, assigned) == 0
