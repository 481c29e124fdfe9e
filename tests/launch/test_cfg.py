import pytest
from conftest import ROOT

from theanompi.core.errors import ConfigError
from theanompi.launch.cfg import parse_cfg_text, read_cfg_file, session_request
from theanompi.rules import BSP

GOOD = "RULE=BSP\nMODELFILE=theanompi.models.mlp\nMODELCLASS=MLP\nDEVICES=cpu0,cpu1\n"


def test_comments_blank_lines_and_spaces():
    raw = parse_cfg_text("# header\n\n RULE = BSP  # trailing\nDEVICES=cpu0\n")
    assert raw == {"RULE": "BSP", "DEVICES": "cpu0"}


def test_values_are_never_evaluated():
    raw = parse_cfg_text("MODEL_NAME=$(rm -rf /) `x` ${HOME}\n")
    assert raw["MODEL_NAME"] == "$(rm -rf /) `x` ${HOME}"


def test_session_request_maps_rule_and_model_keys():
    raw = parse_cfg_text(GOOD + "BSP_SYNC_TYPE=avg\nBSP_AVG_FREQ=3\nN_EPOCHS=4\nMODEL_BATCH_SIZE=16\nMODEL_LR=0.1\n")
    request = session_request(raw)
    assert request.rule is BSP and request.devices == "cpu0,cpu1" and request.modelclass == "MLP"
    options = request.options
    assert options.sync_type == "avg" and options.avg_freq == 3 and options.n_epochs == 4
    assert request.given == {"sync_type", "avg_freq", "n_epochs"}
    assert request.model_options == {"batch_size": 16, "lr": 0.1}


@pytest.mark.parametrize("text, fragment", [
    ("RULE BSP\n", "is not KEY=VALUE"),
    ("RULE=BSP\nRULE=BSP\n", "given twice"),
    ("9KEY=1\n", "malformed"),
])
def test_bad_lines(text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_cfg_text(text)


@pytest.mark.parametrize("extra, fragment", [
    ("FOO=1\n", "unknown key FOO='1'; allowed: .*BSP_SYNC_TYPE"),
    ("BSP_SYNC_TYPE=sometimes\n", "BSP_SYNC_TYPE='sometimes' is not allowed; use one of: cdd, avg"),
    ("BSP_AVG_FREQ=0\n", "BSP_AVG_FREQ='0' is not allowed; use an integer >= 1"),
    ("N_EPOCHS=two\n", "N_EPOCHS='two'"),
    ("BIND=everywhere\n", "BIND='everywhere'"),
    ("EASGD_ALPHA=0.5\n", "key EASGD_ALPHA belongs to RULE=EASGD, but RULE=BSP"),
])
def test_bad_values(extra, fragment):
    with pytest.raises(ConfigError, match=fragment):
        session_request(parse_cfg_text(GOOD + extra))


def test_missing_required_key():
    with pytest.raises(ConfigError, match="required key DEVICES is missing"):
        session_request(parse_cfg_text("RULE=BSP\nMODELFILE=m\nMODELCLASS=C\n"))


def test_unknown_rule():
    with pytest.raises(ConfigError, match="RULE='XYZ' is not allowed; use one of: BSP"):
        session_request(parse_cfg_text(GOOD.replace("RULE=BSP", "RULE=XYZ")))


def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path):
    cfg = tmp_path / "bom.cfg"
    cfg.write_bytes("RULE=BSP\nDEVICES=cpu0\n".encode("utf-8-sig"))
    assert read_cfg_file(cfg) == {"RULE": "BSP", "DEVICES": "cpu0"}
    assert parse_cfg_text("\ufeffRULE=BSP\n") == {"RULE": "BSP"}


def test_example_cfgs_are_valid(tmp_path):
    """Every examples/*.cfg passes the launcher's checks (they are run in full by hand / other tests); a batch
    job's cfg leaves DEVICES to the allocation (examples/cluster.cfg), here two cpu workers."""
    from theanompi.launch.cfg import read_cfg_file, session_request
    from theanompi.launch.plan import plan_session

    for cfg in sorted((ROOT / "examples").glob("*.cfg")):
        plan_session(session_request({"DEVICES": "cpu0,cpu1", **read_cfg_file(cfg)}, cwd=str(ROOT)))


def test_theanompis_shell_spellings_quotes_and_device_arrays():
    """Theano-MPI's launcher sourced its cfg in bash: its examples/bsp/session_multi_node.cfg quotes a value and
    spreads DEVICES over lines as a bash array of host groups."""
    text = ("RULE=BSP\nBSP_EXCH_STRATEGY='ar'\nMODELFILE=\"theanompi.models.mlp\"\nMODELCLASS=MLP\n"
            'DEVICES=("node0:cpu0"\n\t\t "node1:cpu0,cpu1,cpu2")  # one group per host\n')
    raw = parse_cfg_text(text)
    assert raw["BSP_EXCH_STRATEGY"] == "ar" and raw["MODELFILE"] == "theanompi.models.mlp"
    assert raw["DEVICES"] == "node0:cpu0;node1:cpu0,cpu1,cpu2"
    request = session_request(raw)
    assert request.options.exch_strategy == "ar" and request.devices == "node0:cpu0;node1:cpu0,cpu1,cpu2"
    with pytest.raises(ConfigError, match=r"^cfg:1: DEVICES=\( is not closed by '\)'$"):
        parse_cfg_text('DEVICES=("cpu0"\n"cpu1"\n')
    with pytest.raises(ConfigError, match=r"^cfg:1: DEVICES: 'x' after '\)'$"):
        parse_cfg_text('DEVICES=("cpu0") x\n')
