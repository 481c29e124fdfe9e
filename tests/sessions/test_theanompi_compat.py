"""Models written for Theano-MPI (dict config, theanompi.lib.opt, old recorder names, sub-batches,
reset_iter) run under theanompi's rules, in sessions under a real mpiexec. (In one process: lib.opt's two-phase step
in tests/compat/test_lib_opt.py, the adapter's loop in tests/models/test_theano_mpi_adapter.py.)"""

import json

import numpy as np
import pytest
from conftest import ASSETS, ROOT, run_launcher, write_cfg

IDIOM = ASSETS / "theanompi_idiom_models.py"
EXAMPLE = ROOT / "examples" / "theanompi_style" / "cifar10_model.py"


def _session(cfg_dir, modelclass, **keys):
    keys = {"N_EPOCHS": None, "MODELFILE": str(IDIOM), **keys}  # default: the model's own n_epochs
    cfg = write_cfg(cfg_dir / "s.cfg", MODELCLASS=modelclass, RUN_DIR="run", **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=cfg_dir)
    return proc


@pytest.mark.parametrize("rule", ["BSP", "EASGD", "GOSGD"])
def test_theanompi_idiom_model_learns_under_every_rule(cfg_dir, rule):
    # BSP also checks that LR_SCALING with warm-up reaches the model's shared_lr, composed with its own
    # step decay, and that sub-batches and top-5 errors are honoured
    keys = {"LR_SCALING": "linear", "WARMUP_EPOCHS": 2} if rule == "BSP" else {}
    if rule == "EASGD":
        keys["DEVICES"] = "cpu0,cpu1,cpu2"  # the first device is the server's, as in Theano-MPI
    proc = _session(cfg_dir, "DigitsMLP", RULE=rule, **keys)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((cfg_dir / "run" / "summary.json").read_text())
    assert summary["final_val_accuracy"] >= 0.90, summary
    if rule != "BSP":
        return
    first = proc.stdout.splitlines()[0]
    assert "BSP sync type cdd as Theano-MPI ran it" in first, first
    # every sub-batch of every file batch is trained: files of 64 images, each worker's half of them,
    # x 2 sub-batches x 4 epochs
    from theanompi.models.data.digits import load_digits_split

    files_per_worker = len(load_digits_split()[0][0]) // 64 // 2
    assert summary["iterations"] == files_per_worker * 2 * 4
    epochs = [json.loads(line) for line in (cfg_dir / "run" / "epochs.jsonl").read_text().splitlines()]
    assert all(0 <= e["val_error_top5"] <= e["val_error"] for e in epochs)
    seen = json.loads((cfg_dir / "run" / "lr-rank1.json").read_text())
    # warm-up multiplies by 2**(epoch/2) per epoch; adjust_hyperp(2) divides by 10 after epoch 3 (index 2)
    np.testing.assert_allclose(seen, [0.05, 0.05 * 2 ** 0.5, 0.1, 0.01], rtol=1e-6)


def test_model_without_apply_update_gets_avg_and_says_so(cfg_dir):
    proc = _session(cfg_dir, "DigitsMLPNoVels", N_EPOCHS=1, BSP_SYNC_TYPE=None)
    assert proc.returncode != 0  # Theano-MPI contract: cdd needs vels from lib.opt
    assert "no matching vels/vels2" in proc.stderr and "BSP_SYNC_TYPE=avg" in proc.stderr
    proc = _session(cfg_dir, "DigitsMLPNoVels", N_EPOCHS=1, BSP_SYNC_TYPE="avg")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BSP sync type avg" in proc.stdout.splitlines()[0]


@pytest.mark.parametrize("rule, modelfile, modelclass", [
    ("BSP", EXAMPLE, "Cifar10_model"),  # layers2, Theano-MPI's models/cifar10.py idiom
    ("GOSGD", ASSETS / "lasagne_zoo_style.py", "SmallVGG"),  # `import lasagne`, the Lasagne zoo's vgg16.py idiom
])
def test_theanompi_cifar_models_learn_from_model_data_dir(cfg_dir, rule, modelfile, modelclass):
    """Theano-MPI's CIFAR idiom end to end: Cifar10_data reads the official (Python 2) batch files from
    MODEL_DATA_DIR, 2 sub-batches per file batch, lib.opt's step."""
    import sys

    if str(ASSETS) not in sys.path:
        sys.path.insert(0, str(ASSETS))
    import zoo_helpers as zh

    data_dir = zh.write_cifar10(cfg_dir / "cifar-10-batches-py", n_per_file=64, n_test=16)
    proc = _session(cfg_dir, modelclass, RULE=rule, MODELFILE=str(modelfile), MODEL_DATA_DIR=str(data_dir),
                    N_EPOCHS=5)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((cfg_dir / "run" / "summary.json").read_text())
    assert summary["final_val_accuracy"] >= 0.9, summary
