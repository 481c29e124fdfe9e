"""Theano-MPI's model zoo at Theano-MPI's paths, under real mpiexec sessions: every model under BSP, EASGD and GOSGD
on small generated data, and scripts written in Theano-MPI's idiom through ``rule.init``/``rule.wait``.

Sizes are reduced where the model allows it (said per model below): narrower layers, fewer ResNet blocks, 32x32
crops instead of 224/227, 28x28 MNIST-format and 32x32 CIFAR-format files of a few dozen images. Each session is
one epoch of two steps per worker; BSP runs ``avg`` (the same compiled step as EASGD's and GOSGD's workers, so each
network compiles once per suite) except for the CIFAR model, which runs Theano-MPI's default ``cdd``.
(One process: tests/models/test_theanompi_paths.py.)
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import ASSETS, ROOT, run_launcher, write_cfg

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh

# two steps per worker: 64 training images (CIFAR, MNIST) in batches of 16, or one file of 16 images per worker in
# two sub-batches of 8 (ImageNet); 16 validation images
SMALL = {"MODEL_TRAIN_SIZE": 64, "MODEL_VAL_SIZE": 16, "MODEL_BATCH_SIZE": 16}
CIFAR = {**SMALL, "MODEL_WIDTHS": "8,16,16", "MODEL_FC_WIDTH": 32}  # Theano-MPI's: 64,128,64 / 256
IMAGENET = {"MODEL_INPUT_SIZE": 32, "MODEL_N_CLASSES": 4, "MODEL_BATCH_SIZE": 8, "MODEL_PREFETCH": "false"}
GAN = {**SMALL, "MODEL_WIDTHS": "4,8", "MODEL_FC_WIDTH": 16, "MODEL_Z_DIM": 8}
#: MODELFILE, MODELCLASS, data set, reduced sizes (Theano-MPI's own sizes in the comments)
MODELS = {
    "Cifar10_model": ("theanompi.models.cifar10", "Cifar10_model", "cifar10", CIFAR),
    "AlexNet": ("theanompi.models.alex_net", "AlexNet", "imagenet",  # 96..256 wide, fc 4096, 227x227
                {**IMAGENET, "MODEL_WIDTHS": "8,8,8,8,8", "MODEL_FC_WIDTH": 16}),
    "GoogLeNet": ("theanompi.models.googlenet", "GoogLeNet", "imagenet",  # widths x 1/16, 224x224
                  {**IMAGENET, "MODEL_WIDTH": 0.0625}),
    "VGG16": ("theanompi.models.lasagne_model_zoo.vgg16", "VGG16", "imagenet",  # 64..512 wide, fc 4096, 224x224
              {**IMAGENET, "MODEL_WIDTHS": "4,4,8,8,8", "MODEL_FC_WIDTH": 16}),
    "ResNet50": ("theanompi.models.lasagne_model_zoo.resnet50", "ResNet50", "imagenet",  # blocks 3,4,6,3, width 64
                 {**IMAGENET, "MODEL_BLOCKS": "1,1,1,1", "MODEL_WIDTH": 4}),
    "WGAN": ("theanompi.models.lasagne_model_zoo.wgan", "WGAN", "mnist", GAN),  # 64,128 / fc 1024, z 100
    "LSGAN": ("theanompi.models.lasagne_model_zoo.lsgan", "LSGAN", "mnist", GAN),
    "Wide_ResNet": ("theanompi.models.keras_model_zoo.wresnet", "Wide_ResNet", "cifar10",  # WRN-28-4
                    {**SMALL, "MODEL_DEPTH": 10, "MODEL_WIDEN": 1}),
}
RULES = {
    "BSP": {"RULE": "BSP", "BSP_SYNC_TYPE": "avg"},
    "EASGD": {"RULE": "EASGD", "DEVICES": "cpu0,cpu1,cpu2", "EASGD_TAU": 2},  # the first device is the server's
    "GOSGD": {"RULE": "GOSGD", "GOSGD_P": 0.5},
}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return {"cifar10": zh.write_cifar10(root / "cifar-10-batches-py", n_per_file=64, n_test=32),
            "imagenet": zh.write_theanompi_imagenet(root / "imagenet", n_train_files=2, n_val_files=2, batch=16),
            "mnist": zh.write_mnist(root / "mnist", n_train=64, n_val=16)}


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("model", list(MODELS))
def test_model_takes_training_steps_under_the_rule(tmp_path, datasets, model, rule):
    modelfile, modelclass, data, sizes = MODELS[model]
    if "keras" in modelfile and importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed (the [test] extra installs it)")
    keys = {**RULES[rule], **sizes}
    if model == "Cifar10_model" and rule == "BSP":
        keys["BSP_SYNC_TYPE"] = "cdd"  # Theano-MPI's default
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=modelfile, MODELCLASS=modelclass, N_EPOCHS=1, RUN_DIR="run",
                    MODEL_DATA_DIR=datasets[data], **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rule"] == rule and summary["workers"] == 2 and summary["iterations"] >= 2, summary
    assert 0.0 <= summary["final_val_accuracy"] <= 1.0, summary  # validated (a NaN fails the comparison)


def run_idiom_script(cwd, text: str, data_dir, timeout: float = 600) -> subprocess.CompletedProcess:
    """A launch script in Theano-MPI's idiom, run as a user runs it, its data directory from the environment."""
    script = cwd / "launch.py"
    script.write_text(text)
    env = {**os.environ, "MODEL_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_theanompi_easgd_script_learns_cifar10(tmp_path, datasets):
    """Theano-MPI's examples/easgd/test_easgd.py (cudaN -> cpuN), plus our keywords for a short run: a server on
    cpu0, two workers, Cifar10_model from `theanompi.models`, CIFAR-format files from MODEL_DATA_DIR in the
    environment. Chance is 10 %."""
    run_idiom_script(tmp_path, (
        "from theanompi import EASGD\n"
        "rule = EASGD()\n"
        "rule.init(devices=['cpu0', 'cpu1', 'cpu2'], modelfile='theanompi.models', modelclass='Cifar10_model',\n"
        "          n_epochs=6, run_dir='run', model_options={'widths': '8,16,16', 'fc_width': 32, 'batch_size': 16,\n"
        "                                                    'lr': 0.05})\n"
        "rule.wait()\n"), datasets["cifar10"])
    spec = json.loads((tmp_path / "run" / "session.json").read_text())
    assert [(r["role"], r["device"]) for r in spec["ranks"]] == [("server", "cpu0"), ("worker", "cpu1"),
                                                                 ("worker", "cpu2")]
    assert spec["model_options"]["data_dir"] == str(datasets["cifar10"])
    assert f"MODEL_DATA_DIR={datasets['cifar10']} from the environment" in spec["notes"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["workers"] == 2 and summary["final_val_accuracy"] >= 0.5, summary


def test_theanompi_bsp_avg_class_attribute_script_learns_with_the_keras_wide_resnet(tmp_path, datasets):
    """Theano-MPI's examples/bsp/test_wresnet_cifar10.py: `BSP.sync_type = 'avg'` on the class before `BSP()`
    takes effect; the Keras 3 Wide ResNet (WRN-10-1 instead of 28-4) learns the CIFAR-format images."""
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed (the [test] extra installs it)")
    run_idiom_script(tmp_path, (
        "from theanompi import BSP\n"
        "BSP.sync_type = 'avg'\n"
        "rule = BSP()\n"
        "rule.init(devices=['cpu0', 'cpu1'], modelfile='theanompi.models.keras_model_zoo.wresnet',\n"
        "          modelclass='Wide_ResNet', n_epochs=6, run_dir='run',\n"
        "          model_options={'depth': 10, 'widen': 1, 'batch_size': 16, 'lr': 0.05})\n"
        "rule.wait()\n"), datasets["cifar10"])
    spec = json.loads((tmp_path / "run" / "session.json").read_text())
    assert spec["options"]["sync_type"] == "avg" and "BSP sync type avg" in spec["notes"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_val_accuracy"] >= 0.5, summary
