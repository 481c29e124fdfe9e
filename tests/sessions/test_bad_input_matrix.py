"""The bad-input matrix: every case ends with one clear line naming the problem, exit != 0, within 30 s.

``LAUNCH`` cases are refused by the launcher before any rank starts: exit code 2, exactly
one stderr line ``tmlauncher: error: ...``, no run directory. ``RUNTIME`` cases are found
by the ranks (contract checks on the instance, agreement checks before the first exchange,
data errors, NaN): the launcher's last line names the rank and the problem.
(Killed workers and stalled exchanges: tests/sessions/test_faults.py; examples/*.cfg planned without a
session: tests/launch/test_cfg.py.)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import ASSETS, run_launcher, write_cfg

CONTRACT = str(ASSETS / "contract_models.py")
ZOO_CNN = {"MODELFILE": "theanompi.models.zoo.small_cnn", "MODELCLASS": "CifarCNN"}


def _garbage_checkpoint(tmp: Path) -> dict:
    (tmp / "ckpt.hkl").write_bytes(b"garbage")
    return {"RESUME": "ckpt.hkl"}


def _pickled_code_checkpoint(tmp: Path) -> dict:
    import hickle

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp / "pwned"),))

    hickle.dump({"format": 1, "x": Payload()}, str(tmp / "ckpt.hkl"), mode="w")
    return {"RESUME": "ckpt.hkl"}


def _hickle_v3_checkpoint(tmp: Path) -> dict:
    """hickle 3's layout (hickle reads it with dill), with pickled code in it."""
    import pickle

    import h5py
    import numpy as np

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp / "pwned"),))

    with h5py.File(tmp / "ckpt.hkl", "w") as f:
        f.attrs.update({"CLASS": b"hickle", "VERSION": "3.4.9", "PYTHON_VERSION": "3.11"})
        f.attrs["type"] = np.array([b"hickle"], dtype="S6")
        node = f.create_dataset("data_0", data=[np.void(pickle.dumps(Payload(), protocol=0))])
        node.attrs["type"] = np.array([b"pickle"], dtype="S6")
    return {"RESUME": "ckpt.hkl"}


def _negative_epoch_checkpoint(tmp: Path) -> dict:
    import numpy as np

    from theanompi.core.safe_io import save_hickle_atomically

    save_hickle_atomically({"format": 1, "rule": "BSP", "epoch": -1, "iteration": 0, "n_workers": 2,
                            "worker_params": [[np.zeros(2, "float32")]] * 2, "worker_state": [[], []]},
                           tmp / "ckpt.hkl")
    return {"RESUME": "ckpt.hkl"}


def _other_rules_checkpoint(tmp: Path) -> dict:
    import numpy as np

    from theanompi.session.checkpoint import save_checkpoint

    save_checkpoint(tmp / "ckpts", {"rule": "BSP", "epoch": 0, "iteration": 1, "n_workers": 2,
                                    "worker_params": [[np.zeros(2, "float32")]] * 2, "worker_state": [[], []]})
    return {"RULE": "EASGD", "RESUME": "ckpts"}


def _truncated_newest_checkpoint(tmp: Path) -> dict:
    import numpy as np

    from theanompi.session.checkpoint import save_checkpoint

    for epoch in (0, 1):
        path = save_checkpoint(tmp / "ckpts", {"rule": "BSP", "epoch": epoch, "iteration": 1, "n_workers": 2,
                                               "worker_params": [[np.zeros(2, "float32")]] * 2,
                                               "worker_state": [[], []]})
    path.write_bytes(path.read_bytes()[:100])  # a copy cut short
    return {"RESUME": "ckpts/ckpt-epoch-0001.hkl"}


def _corrupt_cifar_file(tmp: Path) -> dict:
    data = tmp / "cifar"
    data.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (data / name).write_bytes(b"\x80\x04not a pickle at all")
    return {**ZOO_CNN, "MODEL_DATA": "cifar10", "MODEL_DATA_DIR": str(data)}


def _corrupt_hickle_file(tmp: Path) -> dict:
    data = tmp / "hkl"
    (data / "train").mkdir(parents=True)
    for i in range(2):
        (data / "train" / f"{i:04d}.hkl").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 64)
    return {"MODELFILE": "theanompi.models.zoo.alexnet", "MODELCLASS": "AlexNet", "MODEL_DATA_DIR": str(data),
            "MODEL_WIDTHS": "8,16,16,16,16", "MODEL_N_CLASSES": 4, "MODEL_FC_WIDTH": 32}


#: name -> (cfg keys or a builder(tmp_path) -> keys, fragment of the one error line)
LAUNCH = {
    "unknown key": ({"FOO": "bar"}, "unknown key FOO='bar'"),
    "bad sync type": ({"BSP_SYNC_TYPE": "maybe"}, "BSP_SYNC_TYPE='maybe' is not allowed; use one of: cdd, avg"),
    "bad avg freq": ({"BSP_AVG_FREQ": "-1"}, "BSP_AVG_FREQ='-1' is not allowed"),
    "bad strategy": ({"BSP_EXCH_STRATEGY": "pigeon"}, "BSP_EXCH_STRATEGY='pigeon' is not allowed"),
    "gpu strategy on cpu": ({"BSP_EXCH_STRATEGY": "nccl32"}, "needs cuda devices"),
    "bad compression": ({"BSP_COMPRESSION": "int8"}, "BSP_COMPRESSION='int8' is not allowed; use one of: none, fp16"),
    "outer optimizer with cdd": ({"BSP_OUTER_OPTIMIZER": "nesterov", "BSP_SYNC_TYPE": "cdd"},
                                 "BSP_OUTER_OPTIMIZER=nesterov steps avg's pseudo-gradients; it needs "
                                 "BSP_SYNC_TYPE=avg"),
    "powersgd over ar16": ({"BSP_EXCH_STRATEGY": "ar16", "BSP_COMPRESSION": "powersgd"},
                           "ar16 is fp16 compression already (ar with BSP_COMPRESSION=fp16)"),
    "bad epochs": ({"N_EPOCHS": "0"}, "N_EPOCHS='0' is not allowed"),
    "absurd epochs": ({"N_EPOCHS": str(10**23)},
                      f"N_EPOCHS='{10**23}' is not allowed; use an integer from 1 to 1000000"),
    "bad boolean": ({"CHECK_FINITE": "perhaps"}, "CHECK_FINITE='perhaps' is not allowed; use true or false"),
    "unknown rule": ({"RULE": "HOGWILD"}, "RULE='HOGWILD' is not allowed"),
    "missing module": ({"MODELFILE": "no_such_pkg.models"},
                       "MODELFILE='no_such_pkg.models': no module named 'no_such_pkg'"),
    "missing file": ({"MODELFILE": "nowhere/model.py"}, "MODELFILE='nowhere/model.py': no such file"),
    "missing class": ({"MODELCLASS": "Nope"}, "MODELCLASS='Nope': module 'theanompi.models.mlp' has no such class"),
    "malformed device": ({"DEVICES": "cpu0,gpu1"}, "'gpu1' is not a device"),
    "duplicate device": ({"DEVICES": "cpu0,cpu0"}, "'cpu0' is listed twice"),
    "cuda without gpu": ({"DEVICES": "cuda0"}, "'cuda0' needs a CUDA GPU"),
    "missing devices": ({"DEVICES": None}, "required key DEVICES is missing"),
    "contract member": ({"MODELFILE": CONTRACT, "MODELCLASS": "NoValIter"},
                        "ModelClass 'NoValIter' lacks method 'val_iter'"),
    "unknown model option": ({"MODEL_DROPOUT": "0.5"}, "unknown model option 'dropout'"),
    "bad model option": ({"MODEL_BATCH_SIZE": "0"}, "model option batch_size=0 is not allowed"),
    "other rule's key": ({"EASGD_ALPHA": "0.5"}, "key EASGD_ALPHA belongs to RULE=EASGD, but RULE=BSP"),
    "worker loss under BSP": ({"ON_WORKER_LOSS": "continue"}, "ON_WORKER_LOSS=continue: RULE=BSP cannot carry on"),
    "worker loss with sync ASGD": ({"RULE": "ASGD", "ASGD_SYNC": "true", "ON_WORKER_LOSS": "continue"},
                                   "ON_WORKER_LOSS=continue needs ASGD_SYNC=false"),
    "resume from nowhere": ({"RESUME": "nowhere"}, "RESUME='"),
    "infinite learning rate": ({"MODEL_LR": "1e400"}, "model option lr=inf is not allowed; use a finite number > 0"),
    "garbage checkpoint": (_garbage_checkpoint, "not a readable hickle file"),
    "hickle v3 checkpoint": (_hickle_v3_checkpoint, "it is a hickle v3 file, which hickle reads with dill"),
    "checkpoint with a negative epoch": (_negative_epoch_checkpoint, "the checkpoint's epoch is -1, not an integer"),
    "checkpoint with pickled code": (_pickled_code_checkpoint, "it references the global"),
    "other rule's checkpoint": (_other_rules_checkpoint, "is a BSP checkpoint, not EASGD"),
    "truncated newest checkpoint": (_truncated_newest_checkpoint,
                                    "ckpts/ckpt-epoch-0000.hkl' can be resumed instead"),
    "cdd without apply_update": ({"MODELFILE": CONTRACT, "MODELCLASS": "NoApplyUpdate", "BSP_SYNC_TYPE": "cdd"},
                                 "lacks method 'apply_update', which cdd needs (or use BSP_SYNC_TYPE=avg)"),
    "missing data directory": ({**ZOO_CNN, "MODEL_DATA": "cifar10", "MODEL_DATA_DIR": "no/such/dir"}, "no/such/dir"),
}

#: name -> (cfg keys or builder, fragment of the launcher's last line)
RUNTIME = {
    "model raises mid-epoch": ({"MODELFILE": CONTRACT, "MODELCLASS": "RaisesMidEpoch", "N_EPOCHS": 3},
                               "rank 1 (worker on cpu1): RuntimeError: injected failure"),
    "empty params": ({"MODELFILE": CONTRACT, "MODELCLASS": "NoParams"}, "'params' must be a non-empty list"),
    "ranks disagree on batch counts": ({"MODELFILE": CONTRACT, "MODELCLASS": "UnequalShards"},
                                       "workers disagree on n_batch_train: rank 0 has 24, rank 1 has 25"),
    "ranks disagree on parameter shapes": ({"MODELFILE": CONTRACT, "MODELCLASS": "RankDependentShape"},
                                           "workers disagree on n_params: rank 0 has"),
    "NaN in the exchanged gradient": ({"MODELFILE": CONTRACT, "MODELCLASS": "NaNInjector", "N_EPOCHS": 3},
                                      "NaN or Inf in the update vector of parameter 'b1' (params[3]) on worker 1"),
    # overlapped with backward, each bucket is checked before it leaves: the first bucket (the last params,
    # 4.bias and the 6.* layer, of 3 buckets) names its first param, where a check of the whole vector names params[0]
    "NaN in a gradient bucket": ({"MODELFILE": str(ASSETS / "torch_models.py"), "MODELCLASS": "TorchNaNInjector",
                                  "BSP_BUCKET_MB": 0.02, "N_EPOCHS": 2},
                                 "NaN or Inf in the update vector of parameter '4.bias' (params[3]) on worker 1"),
    "reducer bound to a wrong buffer": ({"MODELFILE": str(ASSETS / "torch_models.py"),
                                         "MODELCLASS": "TorchShortReducerBuffer"},
                                        "ContractError: ModelClass 'TorchShortReducerBuffer'.attach_reducer: the "
                                        "overlapped exchange needs the flat gradient buffer of 17258 elements, got "
                                        "ndarray (17257,)"),
    "corrupt CIFAR batch file": (_corrupt_cifar_file, "data_batch_1' is not a readable pickle"),
    "corrupt hickle data file": (_corrupt_hickle_file, "0000.hkl"),
}


def _keys(spec, tmp_path: Path) -> dict:
    return spec(tmp_path) if callable(spec) else dict(spec)


def _needs_no_gpu(name: str) -> None:
    if name == "cuda without gpu":
        from theanompi.core.devices import count_local_gpus

        if count_local_gpus():
            pytest.skip("this machine has a GPU")


def test_the_matrix_has_at_least_20_cases():
    # + the three cfg/flag tests below and examples/*.cfg (tests/launch/test_cfg.py::test_example_cfgs_are_valid)
    assert len(LAUNCH) + len(RUNTIME) + 4 >= 20


@pytest.mark.parametrize("name", sorted(LAUNCH))
def test_refused_at_launch(name, tmp_path):
    _needs_no_gpu(name)
    spec, fragment = LAUNCH[name]
    cfg = write_cfg(tmp_path / "s.cfg", **_keys(spec, tmp_path))
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=60)  # a hang fails (TimeoutExpired)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tmlauncher: error: ") and fragment in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()  # nothing was started
    assert not (tmp_path / "pwned").exists()  # nothing from a file was executed


@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_found_by_the_ranks(name, tmp_path):
    spec, fragment = RUNTIME[name]
    cfg = write_cfg(tmp_path / "s.cfg", **_keys(spec, tmp_path))
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)  # a hang fails (TimeoutExpired)
    assert proc.returncode not in (0, None), proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tmlauncher: session failed: rank ") and fragment in last, last


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
