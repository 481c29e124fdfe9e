"""EASGD without ranks: the launch plan, its options and their checks, the grants of steps.
(Sessions under a real mpiexec: tests/sessions/test_easgd.py.)"""

import pytest
from conftest import plan

import theanompi
from theanompi.core.devices import parse_devices
from theanompi.core.errors import ConfigError
from theanompi.rules.easgd import EASGD, grant_steps


def test_launch_plan_puts_the_server_first_on_the_first_devices_host():
    ranks = EASGD.launch_ranks(parse_devices("cpu0,cpu1"), {})
    assert [(r.role, str(r.device)) for r in ranks] == [("server", "cpu0"), ("worker", "cpu0"), ("worker", "cpu1")]
    remote = EASGD.launch_ranks(parse_devices("node1:cpu2,cpu3;node2:cpu0"), {})
    assert [(r.role, str(r.device)) for r in remote] == [
        ("server", "node1:cpu0"), ("worker", "node1:cpu2"), ("worker", "node1:cpu3"), ("worker", "node2:cpu0")]


def test_plan_session_defaults_and_registration(tmp_path):
    import theanompi
    from theanompi.rules import get_rule

    assert theanompi.EASGD.rule is EASGD and get_rule("easgd") is EASGD
    spec, ranks = plan(EASGD, ["cpu0", "cpu1", "cpu2"], "theanompi.models.mlp", "MLP", cwd=str(tmp_path))
    assert len(ranks) == 4 and [r["role"] for r in spec.ranks] == ["server", "worker", "worker", "worker"]
    assert spec.options.alpha == 0.5 and spec.options.tau == 4
    spec, _ = plan(EASGD, "cpu0", "theanompi.models.mlp", "MLP", cwd=str(tmp_path), alpha="1", tau="7")
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
        rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
                  run_dir=str(tmp_path / "never"), **options)
    assert message in str(err.value)
    assert rule.run is None and not (tmp_path / "never").exists()


def test_grants_add_up_to_the_target_with_a_partial_last_block():
    assigned, grants = 0, []
    while (g := grant_steps(4, 10, assigned)):
        grants.append(g)
        assigned += g
    assert grants == [4, 4, 2] and grant_steps(4, 10, assigned) == 0
