"""The disk cache of compiled functions: a loaded function computes exactly what a fresh compile does on the
model's own shared variables, and every odd case (an indescribable graph, a damaged entry, the cache turned off)
compiles as usual. The key's own tests: test_graph_signature.py; the store's: test_function_store.py."""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from conftest import ASSETS

sys.path.insert(0, str(ASSETS))
from function_graphs import small_graph

import theanompi.nn as L
from theanompi.backend import function_cache as fc
from theanompi.backend.function_store import ENTRY_MAGIC, read_entry
from theanompi.backend.graph_signature import Uncacheable, graph_signature
from theanompi.models.contract import WorkerConfig
from theanompi.models.mlp import MLP
from theanompi.session.recorder import Recorder


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test its own function cache (the C modules stay in the shared compile cache)."""
    monkeypatch.setenv("THEANOMPI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("THEANOMPI_FUNCTION_CACHE", raising=False)
    return tmp_path / "cache" / "functions"


def entries(directory) -> list[str]:
    return sorted(p.name for p in directory.glob("*.pkl")) if directory.exists() else []


def test_loaded_function_updates_the_callers_own_shared_variables(private_cache):
    first = small_graph()
    fc.cached_function(*first)
    assert len(entries(private_cache)) == 1
    inputs, outputs, updates = small_graph()  # new shared variables, same structure
    w, v = updates[1][0], updates[0][0]
    f = fc.cached_function(inputs, outputs, updates)
    assert f.maker.fgraph is not None and len(entries(private_cache)) == 1
    x = np.arange(6, dtype="float32").reshape(2, 3)
    w.set_value(np.array([1.0, -1.0, 0.5], dtype="float32"))
    loss = float(f(x)[0])
    np.testing.assert_allclose(loss, ((x @ np.array([1.0, -1.0, 0.5])) ** 2).mean(), rtol=1e-6)
    assert np.abs(v.get_value()).sum() > 0 and not np.allclose(w.get_value(), [1.0, -1.0, 0.5])
    assert np.all(first[2][1][0].get_value() == 1.0)  # the first graph's variables were not touched


def mlp(**options):
    return MLP(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"hidden": 16, **options}))


def three_steps(model) -> list[np.ndarray]:
    model.compile_iter_fns(None)
    model.adjust_hyperp(0)
    recorder = Recorder(None)
    for count in range(3):
        model.train_iter(count, recorder)
    model.val_iter(0, recorder)
    return [p.get_value() for p in model.params + model.state_vars] + [np.asarray(recorder.train_sums())]


def test_cached_model_trains_bit_for_bit_like_a_fresh_compile(private_cache, monkeypatch):
    monkeypatch.setenv("THEANOMPI_FUNCTION_CACHE", "off")
    reference = three_steps(mlp())
    assert entries(private_cache) == []
    monkeypatch.delenv("THEANOMPI_FUNCTION_CACHE")
    stored = three_steps(mlp())
    assert len(entries(private_cache)) == 2  # the training step and validation
    loaded = three_steps(mlp())
    assert len(entries(private_cache)) == 2
    for a, b, c in zip(reference, stored, loaded):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_default_updates_of_a_loaded_function_advance_the_callers_random_state(private_cache):
    def dropout_fn():
        l_in = L.InputLayer((None, 50))
        out = L.get_output(L.DropoutLayer(l_in, p=0.5))
        return fc.cached_function([l_in.input_var], out)

    dropout_fn()
    f = dropout_fn()
    assert len(entries(private_cache)) == 1
    x = np.ones((4, 50), dtype="float32")
    first, second = f(x), f(x)
    assert set(np.unique(first)) <= {0.0, 2.0} and not np.array_equal(first, second)


def test_a_graph_it_cannot_describe_compiles_without_the_cache(private_cache):
    x = pt.vector("x")
    squares = pytensor.scan(lambda v: v ** 2, sequences=[x], return_updates=False)
    with pytest.raises(Uncacheable, match="inner graph"):
        graph_signature([x], [squares])
    f = fc.cached_function([x], squares)
    np.testing.assert_allclose(f(np.arange(3, dtype=x.dtype)), [0, 1, 4])
    assert entries(private_cache) == []


class Payload:
    """Pickled code: unpickling it leaves ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def other_graph():
    """small_graph's inputs, another function of them."""
    inputs, outputs, updates = small_graph()
    return inputs, [outputs[0] * 2], updates


def _replace_entry(path, how, marker):
    """Put ``how``'s bad entry where ``path`` is (its entry was stored); returns whether it is replaced later."""
    path.unlink()
    if how == "damaged":
        path.write_bytes(ENTRY_MAGIC + path.stem.encode() + b"\n" + b"not a pickle")
    elif how == "of an older format (a bare pickle of code)":
        path.write_bytes(pickle.dumps(Payload(marker)))
    elif how == "another graph's, same inputs":
        fc.cached_function(*other_graph())
        (other,) = [p for p in path.parent.glob("*.pkl")]
        other.rename(path)
    elif how == "a directory":
        path.mkdir()
    elif how == "a FIFO":
        os.mkfifo(path)
    elif how == "a link to a file elsewhere":
        target = path.parent.parent / "elsewhere.pkl"
        target.write_bytes(ENTRY_MAGIC + path.stem.encode() + b"\n" + pickle.dumps(Payload(marker)))
        path.symlink_to(target)
    elif how == "owned by another user, with code in it":
        path.write_bytes(ENTRY_MAGIC + path.stem.encode() + b"\n" + pickle.dumps(Payload(marker)))
        os.chown(path, 54321, -1)
    return how in ("damaged", "of an older format (a bare pickle of code)", "another graph's, same inputs")


BAD_ENTRIES = ["damaged", "of an older format (a bare pickle of code)", "another graph's, same inputs", "a directory",
               "a FIFO", "a link to a file elsewhere", "owned by another user, with code in it"]


@pytest.mark.timeout(120)  # a FIFO read would block forever
@pytest.mark.parametrize("how", BAD_ENTRIES)
def test_an_entry_that_is_not_this_functions_is_never_used(private_cache, tmp_path, caplog, how):
    if "another user" in how and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    fc.cached_function(*small_graph())
    (path,) = private_cache.glob("*.pkl")
    replaced = _replace_entry(path, how, tmp_path / "payload-ran")
    inputs, outputs, updates = small_graph()
    f = fc.cached_function(inputs, outputs, updates)
    assert float(f(np.ones((1, 3), dtype="float32"))[0]) == 9.0  # the function asked for, freshly compiled
    assert not (tmp_path / "payload-ran").exists()
    assert str(path) in caplog.text and ("cannot use" if replaced else "is not used") in caplog.text
    if replaced:
        assert read_entry(path, path.stem) is not None  # the right function is stored there now
    else:
        assert not path.is_file() or path.is_symlink() or path.stat().st_uid == 54321  # left alone


def test_other_modes_are_not_cached(private_cache):
    inputs, outputs, updates = small_graph()
    fc.cached_function(inputs, outputs, updates, mode="FAST_COMPILE")
    assert entries(private_cache) == []


def test_conv_batch_norm_pool_network_is_cached_and_loads_to_the_same_step(private_cache):
    """Our own ops (conv, pooling, fused batch norm) and batch norm's running averages through a loaded step."""
    def step():
        l_in = L.InputLayer((None, 3, 8, 8))
        net = L.MaxPool2DLayer(L.BatchNormLayer(L.Conv2DLayer(l_in, 4, 3, pad=1)), 2)
        net = L.DenseLayer(net, 5, nonlinearity=L.nonlinearities.softmax)
        y = pt.ivector("y")
        loss = L.objectives.categorical_crossentropy(L.get_output(net), y).mean()
        params = L.get_all_params(net, trainable=True)
        updates = L.updates.sgd(loss, params, 0.1)
        f = fc.cached_function([l_in.input_var, y], loss, updates=updates)
        return f, L.get_all_param_values(net), net

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 3, 8, 8)).astype("float32"), rng.integers(0, 5, 6).astype("int32")
    f1, start, net1 = step()
    f2, _, net2 = step()
    assert len(entries(private_cache)) == 1
    L.set_all_param_values(net2, start)
    assert [float(f1(x, y)) for _ in range(3)] == [float(f2(x, y)) for _ in range(3)]
    for a, b in zip(L.get_all_param_values(net1), L.get_all_param_values(net2)):
        np.testing.assert_array_equal(a, b)  # weights and the running averages moved alike




def test_an_entry_of_this_graph_naming_code_is_refused_and_replaced(private_cache, tmp_path, caplog):
    """In the user's own cache too, an entry whose pickle names a global beyond what a compiled graph is made of
    (the safe loader's graph allow-list) is never unpickled: the function is compiled again and stored there."""
    fc.cached_function(*small_graph())
    (path,) = private_cache.glob("*.pkl")
    path.write_bytes(ENTRY_MAGIC + path.stem.encode() + b"\n" + pickle.dumps(Payload(tmp_path / "payload-ran")))
    inputs, outputs, updates = small_graph()
    f = fc.cached_function(inputs, outputs, updates)
    assert float(f(np.ones((1, 3), dtype="float32"))[0]) == 9.0
    assert not (tmp_path / "payload-ran").exists()
    assert f"cannot use {path} (refusing to unpickle" in caplog.text and ".system'" in caplog.text
    assert read_entry(path, path.stem) is not None
