"""Models written for Theano-MPI (dict config, theanompi.lib.opt, old recorder names, sub-batches,
reset_iter) run under theanompi's rules; lib.opt's two-phase step equals one process with N x the batch."""

import importlib.util
import json

import numpy as np
import pytest
from conftest import ASSETS, ROOT, run_launcher, write_cfg

from theanompi.models import current_config
from theanompi.models.contract import WorkerConfig
from theanompi.models.theano_mpi_adapter import TheanoMPIModel
from theanompi.session.recorder import Recorder

IDIOM = ASSETS / "theanompi_idiom_models.py"
EXAMPLE = ROOT / "examples" / "theanompi_style" / "cifar10_model.py"


def _idiom_module():
    spec = importlib.util.spec_from_file_location("theanompi_idiom_models_test", IDIOM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(module, cls_name, rank, size, sync_type):
    config = WorkerConfig(rank=rank, size=size, seed=0, device=f"cpu{rank}", sync_type=sync_type)
    current_config.set_current(config)
    try:
        model = getattr(module, cls_name)(config)
        model.compile_iter_fns(sync_type)
    finally:
        current_config.set_current(None)
    return model


def _load(model, x, y):
    padded_x = np.zeros(model.shared_x.get_value().shape, dtype="float32")
    padded_y = np.zeros(model.shared_y.get_value().shape, dtype="int64")
    padded_x[:len(x)], padded_y[:len(y)] = x, y
    model.shared_x.set_value(padded_x)
    model.shared_y.set_value(padded_y)


@pytest.mark.slow
@pytest.mark.parametrize("cls_name, nesterov", [("DigitsMLP", False), ("DigitsMLP", True),
                                                 ("DigitsMLPPlainSGD", False)])
def test_two_phase_step_equals_one_process_with_twice_the_batch(cls_name, nesterov):
    module = _idiom_module()
    workers = [_build(module, cls_name, r, 2, "cdd") for r in range(2)]
    module.batch_size = module.file_batch_size = 64  # the reference sees both workers' batches at once
    reference = _build(module, cls_name, 0, 1, "local")
    for m in workers + [reference]:
        m.use_nesterov_momentum = nesterov
    if nesterov:  # rebuild the steps with Nesterov momentum
        workers = [_rebuild(m, "cdd", 2) for m in workers]
        reference = _rebuild(reference, "local", 1)
    assert all(len(m.vels) == 4 for m in workers) and reference.vels == []
    x, y = workers[0].data.train[0]
    for step in range(3):
        for r, w in enumerate(workers):
            _load(w, x[32 * r:32 * (r + 1)], y[32 * r:32 * (r + 1)])
            w.get_vel(0)
        for i in range(4):  # the exchange: vels2 = sum over workers of vels
            total = sum(w.vels[i].get_value() for w in workers)
            for w in workers:
                w.vels2[i].set_value(total)
        for w in workers:
            w.descent_vel()
        _load(reference, x, y)
        reference.get_vel(0)
        for w in workers:
            for p, q in zip(w.params, reference.params):
                np.testing.assert_allclose(p.get_value(), q.get_value(), rtol=2e-5, atol=2e-6,
                                           err_msg=f"{cls_name} nesterov={nesterov} step {step} {p.name}")


def _rebuild(model, sync_type, size):
    config = WorkerConfig(rank=model.rank, size=size, seed=0, device="cpu0", sync_type=sync_type)
    current_config.set_current(config)
    try:
        model.compile_iter_fns(sync_type)
    finally:
        current_config.set_current(None)
    return model


class _FakeData:
    n_batch_train, n_batch_val = 3, 2


class _FakeTheanoMPIModel:
    """Records the calls a Theano-MPI loop makes."""

    def __init__(self):
        self.calls, self.data, self.n_subb, self.epoch, self.params = [], _FakeData(), 2, None, []

    def compile_iter_fns(self, *args):
        self.calls.append(("compile", args))

    def train_iter(self, count, recorder):
        self.calls.append(("train", count, self.epoch))

    def val_iter(self, count, recorder):
        self.calls.append(("val", count))

    def reset_iter(self, mode):
        self.calls.append(("reset", mode))

    def adjust_hyperp(self, epoch):
        self.calls.append(("adjust", epoch))

    def cleanup(self):
        self.calls.append(("cleanup",))


def test_adapter_keeps_theanompi_loop_order_and_sub_batches():
    inner = _FakeTheanoMPIModel()
    model = TheanoMPIModel(inner, WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    model.compile_iter_fns("local")
    assert (model.data.n_batch_train, model.data.n_batch_val) == (6, 4)
    rec = Recorder(run_dir=None)
    for epoch in range(2):
        model.adjust_hyperp(epoch)
        for count in range(model.data.n_batch_train):
            assert model.train_iter(count, rec) is None
        for count in range(model.data.n_batch_val):
            model.val_iter(count, rec)
    model.cleanup()
    epoch0 = [("train", c, 0) for c in (0, 0, 1, 1, 2, 2)] + [("reset", "train")] + \
             [("val", c) for c in (0, 0, 1, 1)] + [("reset", "val")]
    epoch1 = [(k, *rest[:-1], 1) if k == "train" else (k, *rest) for k, *rest in epoch0]
    assert inner.calls == [("compile", ("local",))] + epoch0 + [("adjust", 0)] + epoch1 + [("cleanup",)]


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
