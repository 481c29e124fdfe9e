"""Every bad input ends with one line naming the problem, exit code 2, within 10 s, no rank started."""

import pytest

from conftest import ASSETS, run_launcher, write_cfg

CONTRACT = str(ASSETS / "contract_models.py")

CASES = {
    "unknown key": ({"FOO": "bar"}, "unknown key FOO='bar'"),
    "bad sync type": ({"BSP_SYNC_TYPE": "maybe"}, "BSP_SYNC_TYPE='maybe' is not allowed; use one of: cdd, avg"),
    "bad avg freq": ({"BSP_AVG_FREQ": "-1"}, "BSP_AVG_FREQ='-1' is not allowed"),
    "bad strategy": ({"BSP_EXCH_STRATEGY": "pigeon"}, "BSP_EXCH_STRATEGY='pigeon' is not allowed"),
    "gpu strategy on cpu": ({"BSP_EXCH_STRATEGY": "nccl32"}, "needs cuda devices"),
    "bad epochs": ({"N_EPOCHS": "0"}, "N_EPOCHS='0' is not allowed"),
    "unknown rule": ({"RULE": "HOGWILD"}, "RULE='HOGWILD' is not allowed"),
    "missing module": ({"MODELFILE": "no_such_pkg.models"}, "MODELFILE='no_such_pkg.models': no module named 'no_such_pkg'"),
    "missing file": ({"MODELFILE": "nowhere/model.py"}, "MODELFILE='nowhere/model.py': no such file"),
    "missing class": ({"MODELCLASS": "Nope"}, "MODELCLASS='Nope': module 'theanompi.models.mlp' has no such class"),
    "malformed device": ({"DEVICES": "cpu0,gpu1"}, "'gpu1' is not a device"),
    "duplicate device": ({"DEVICES": "cpu0,cpu0"}, "'cpu0' is listed twice"),
    "cuda without gpu": ({"DEVICES": "cuda0"}, "'cuda0' needs a CUDA GPU"),
    "missing devices": ({"DEVICES": None}, "required key DEVICES is missing"),
    "contract member": ({"MODELFILE": CONTRACT, "MODELCLASS": "NoValIter"}, "ModelClass 'NoValIter' lacks method 'val_iter'"),
    "unknown model option": ({"MODEL_DROPOUT": "0.5"}, "unknown model option 'dropout'"),
    "bad model option": ({"MODEL_BATCH_SIZE": "0"}, "model option batch_size=0 is not allowed"),
    "other rule's key": ({"EASGD_ALPHA": "0.5"}, "key EASGD_ALPHA belongs to RULE=EASGD, but RULE=BSP"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_cfg(name, tmp_path):
    keys, fragment = CASES[name]
    if name == "cuda without gpu":
        from theanompi.devices import count_local_gpus

        if count_local_gpus():
            pytest.skip("this machine has a GPU")
    cfg = write_cfg(tmp_path / "s.cfg", **keys)
    proc, seconds = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tmlauncher: error: ")
    assert fragment in lines[0]
    assert seconds < 10
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_line_without_equals(tmp_path):
    cfg = tmp_path / "s.cfg"
    cfg.write_text("RULE=BSP\nDEVICES cpu0\n")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 2
    assert "s.cfg:2: 'DEVICES cpu0' is not KEY=VALUE" in proc.stderr


def test_missing_cfg_file(tmp_path):
    proc, _ = run_launcher("-cfg=nope.cfg", cwd=tmp_path)
    assert proc.returncode == 2
    assert "cfg file 'nope.cfg' does not exist" in proc.stderr


def test_flag_overrides_are_validated_too(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg")
    proc, _ = run_launcher("--config", str(cfg), "--devices", "cpu0,cpu0", cwd=tmp_path)
    assert proc.returncode == 2 and "listed twice" in proc.stderr
    proc, _ = run_launcher("--config", str(cfg), "--set", "N_EPOCHS=x", cwd=tmp_path)
    assert proc.returncode == 2 and "N_EPOCHS='x'" in proc.stderr


def test_example_cfgs_are_valid(tmp_path):
    """Every examples/*.cfg passes the launcher's checks (they are run in full by hand / other tests)."""
    from theanompi.cfg import read_cfg_file, session_arguments

    from conftest import ROOT

    for cfg in sorted((ROOT / "examples").glob("*.cfg")):
        rule, kwargs = session_arguments(read_cfg_file(cfg))
        rule.plan_session(cwd=str(ROOT), **kwargs)
