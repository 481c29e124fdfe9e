"""A small CNN built with the layers trains on real data (digits), alone and as a theanompi ModelClass."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import theanompi.nn as L
from theanompi.models.base import ClassifierModel
from theanompi.models.contract import WorkerConfig, check_model_instance
from theanompi.models.data.digits import load_digits_split
from theanompi.session.recorder import Recorder

floatX = pytensor.config.floatX


def test_cnn_with_batchnorm_and_dropout_learns_digits():
    (xt, yt), (xv, yv) = load_digits_split(flat=False, dtype=floatX)
    L.init.set_rng(np.random.default_rng(0))
    l_in = L.InputLayer((None, 1, 8, 8))
    net = L.batch_norm(L.Conv2DLayer(l_in, 8, 3, pad="same", W=L.init.HeNormal("relu")))
    net = L.MaxPool2DLayer(net, 2)
    net = L.DropoutLayer(net, p=0.2)
    net = L.DenseLayer(net, 10, nonlinearity=L.nonlinearities.softmax)
    y = pt.ivector("y")
    prediction = L.get_output(net)
    loss = L.objectives.categorical_crossentropy(prediction, y).mean()
    params = L.get_all_params(net, trainable=True)
    train = pytensor.function([l_in.input_var, y], loss,
                              updates=L.updates.nesterov_momentum(loss, params, learning_rate=0.05))
    val_pred = L.get_output(net, deterministic=True)
    val = pytensor.function([l_in.input_var, y], L.objectives.categorical_accuracy(val_pred, y).mean())
    acc0 = float(val(xv, yv))
    losses = []
    for _epoch in range(2):
        for i in range(0, len(xt) - 63, 64):
            losses.append(float(train(xt[i:i + 64], yt[i:i + 64])))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    acc = float(val(xv, yv))
    assert acc > 0.85 and acc > acc0 + 0.3, (acc0, acc)
    bn = L.get_all_layers(net)[2]
    assert isinstance(bn, L.BatchNormLayer) and np.any(bn.mean.get_value() != 0)  # statistics were tracked


class LayersCNN(ClassifierModel):
    """A ModelClass whose network is built with theanompi.nn."""

    defaults = {**ClassifierModel.defaults, "batch_size": 50, "lr": 0.05}

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split(dtype=pytensor.config.floatX)
        return self.shard(xt, yt, xv, yv)

    def build_network(self, x, rng):
        L.init.set_rng(rng)  # seeded from config.seed: identical on every rank
        net = L.ReshapeLayer(L.InputLayer((None, 64), input_var=x), ([0], 1, 8, 8))
        net = L.Conv2DLayer(net, 6, 3, pad=1)
        net = L.MaxPool2DLayer(net, 2)
        net = L.DenseLayer(net, 10, nonlinearity=None)
        return L.get_all_params(net, trainable=True), L.get_output(net)


@pytest.mark.slow
def test_layers_network_as_modelclass_cdd_equals_local_and_learns():
    cfg = WorkerConfig(rank=0, size=1, seed=3, device="cpu0")
    a, b = LayersCNN(cfg), LayersCNN(cfg)
    a.compile_iter_fns("cdd")
    b.compile_iter_fns("local")
    check_model_instance(a, "cdd")
    rec = Recorder(None)
    (xv, yv) = a.data.x_val, a.data.y_val
    predict = pytensor.function([a.x], pt.argmax(a.logits, axis=1))
    acc0 = np.mean(predict(xv) == yv)
    a.adjust_hyperp(0)
    b.adjust_hyperp(0)
    for count in range(a.data.n_batch_train):
        a.apply_update(a.train_iter(count, rec))
        b.train_iter(count, rec)
    for p, q in zip(a.params, b.params):
        np.testing.assert_allclose(p.get_value(), q.get_value(), rtol=1e-4, atol=1e-5)
    acc = np.mean(predict(xv) == yv)  # after one epoch of 30 steps
    assert acc > 0.6 and acc > acc0 + 0.4, (acc0, acc)
