"""Small data directories in the layouts Theano-MPI's DataClass API reads (CIFAR-10 python batches, mnist.npz),
for tests/models/data/test_data_theanompi_api.py and tests/sessions/test_data_ranks.py."""

import pickle

import numpy as np
from cifar_format import official_bytes

N_PER_FILE = 8  # 5 files: 40 images, 32 train / 8 val


def cifar_bytes(data, labels, flavour):
    if flavour == "py2":  # the official archive: Python 2 str keys and values
        return official_bytes({b"batch_label": b"training batch", b"labels": [int(v) for v in labels],
                               b"data": data, b"filenames": [b"x.png"] * len(labels)})
    protocol = int(flavour[-1])  # Python 3 writers: str keys, protocol 2 (bytes via _codecs) to 4
    return pickle.dumps({"batch_label": "training batch", "labels": list(np.asarray(labels, np.int64)),
                         "data": data, "filenames": ["x.png"] * len(labels)}, protocol=protocol)


def write_cifar(root, flavour="py2", seed=0):
    """data_batch_1..5 (no test_batch: Cifar10_data does not need it); returns (images, labels) as written."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i in range(1, 6):
        x, y = rng.integers(0, 256, (N_PER_FILE, 3072), dtype=np.uint8), rng.integers(0, 10, N_PER_FILE)
        (root / f"data_batch_{i}").write_bytes(cifar_bytes(x, y, flavour))
        xs.append(x), ys.append(y)
    return np.concatenate(xs).reshape(-1, 3, 32, 32), np.concatenate(ys)


def write_mnist_npz(root, n_train=50, n_val=20, uint8=False, val_key="val", seed=0):
    rng = np.random.default_rng(seed)
    if uint8:
        xt, xv = (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) for n in (n_train, n_val))
    else:
        xt, xv = (rng.random((n, 784), dtype=np.float32) for n in (n_train, n_val))
    yt, yv = np.arange(n_train) % 10, np.arange(n_val) % 10
    np.savez(root / "mnist.npz", x_train=xt, y_train=yt, **{f"x_{val_key}": xv, f"y_{val_key}": yv})
    return xt, yt, xv, yv
