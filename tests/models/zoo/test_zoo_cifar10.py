"""The CIFAR-10 path: Cifar10Data on small files in the real python-batch format, CifarCNN and ResNet on it."""

import pickle
import sys

import numpy as np
import pytest
from conftest import ASSETS

from theanompi.core.safe_load import UnsafePickleError
from theanompi.models.data.cifar10 import Cifar10Data
from theanompi.models.zoo.small_cnn import CifarCNN

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory):
    """data_batch_1..5 (64 images each) and test_batch (64), as cifar-10-python.tar.gz holds them."""
    return zh.write_cifar10(tmp_path_factory.mktemp("cifar-10-batches-py"), n_per_file=64, n_test=64)


def test_files_are_the_official_format(cifar_dir):
    raw = (cifar_dir / "data_batch_1").read_bytes()
    assert raw.startswith(b"\x80\x02") and b"cnumpy.core.multiarray\n_reconstruct\n" in raw


@pytest.mark.slow
def test_cifar_cnn_trains_on_cifar10_files(cifar_dir):
    """CifarCNN (60,362 parameters) on 320 training images: measured 100 % on the 64 test images
    from the first epoch on (the class is a bright bar's row band, see tests/assets/zoo_helpers.py)."""
    model = zh.make_model(CifarCNN, data_dir=str(cifar_dir), batch_size=32, lr=0.02)
    assert isinstance(model.data, Cifar10Data) and model.data.input_shape == (3, 32, 32)
    assert model.data.x_train.shape == (320, 3, 32, 32) and model.data.n_batch_train == 10
    assert sum(p.get_value().size for p in model.params) == 60_362
    xb, _ = model.data.train_batch(0)
    assert xb.dtype == np.float32 and abs(float(xb.mean())) < 0.1  # channel means subtracted
    _, err0 = zh.validate(model)
    losses = zh.train_epochs(model, 5)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    _, err = zh.validate(model)
    assert err <= 0.2 and err < err0 - 0.5, (err0, err)


def test_subsets_and_a_file_carrying_code_is_refused(cifar_dir, tmp_path):
    model = CifarCNN(zh_config(data_dir=str(cifar_dir), train_size=100, val_size=20, batch_size=10))
    assert model.data.x_train.shape[0] == 100 and model.data.n_batch_val == 1  # 2 workers: 10 val images each
    for f in cifar_dir.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}, protocol=2))
    with pytest.raises(UnsafePickleError):
        CifarCNN(zh_config(data_dir=str(tmp_path)))


def zh_config(**options):
    from theanompi.models.contract import WorkerConfig

    return WorkerConfig(rank=1, size=2, seed=0, device="cpu1", model_options=options)
