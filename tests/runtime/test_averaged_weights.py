"""A worker's averaged weights (AVERAGE_WEIGHTS=ema): the params' and batch-norm statistics' averages equal NumPy
references over the same sequences, the averaged model is validated in place of the model's own and then put back,
and a checkpoint's state resumes it exactly."""

import numpy as np
import pytensor
from mpi4py import MPI

import theanompi.nn as L
from theanompi.comm.fused_params import FusedParams
from theanompi.comm.param_access import host_copy
from theanompi.core.session_options import SessionOptions
from theanompi.models.base import ClassifierModel
from theanompi.models.contract import WorkerConfig
from theanompi.models.data.digits import load_digits_split
from theanompi.runtime.averaged_weights import WorkerAverage
from theanompi.runtime.records import validate
from theanompi.session.recorder import Recorder

OPTIONS = SessionOptions(average_weights="ema", ema_decay=0.9)


class BatchNormMLP(ClassifierModel):
    """dense(16) - batch norm - relu - dense(10) on the digits."""

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split()
        return self.shard(xt.astype(pytensor.config.floatX), yt, xv.astype(pytensor.config.floatX), yv)

    def build_network(self, x, rng):
        L.init.set_rng(rng)
        net = L.InputLayer((None, 64), input_var=x)
        net = L.batch_norm(L.DenseLayer(net, 16))
        net = L.DenseLayer(net, 10, nonlinearity=None)
        self.network = net
        return (L.get_all_params(net, trainable=True), L.get_output(net),
                L.get_output(net, deterministic=True))


def reference(sequence, decay, batches):
    average, seen = sequence[0].astype(np.float64), 0
    for x in sequence[1:]:
        d = min(decay, (1 + seen) / (10 + seen)) ** batches
        seen += batches
        average = d * average + (1 - d) * x.astype(np.float64)
    return average


def test_averages_follow_their_references_and_the_averaged_model_is_validated_in_place():
    model = BatchNormMLP(WorkerConfig(rank=0, size=2, seed=0, device="cpu0", options=OPTIONS,
                                      model_options={"batch_size": 32, "lr": 0.1}))
    model.compile_iter_fns("local")
    fused = FusedParams(model.params)
    average = WorkerAverage.for_worker(model, fused, OPTIONS)
    assert len(average.stat_vars) == 2  # the batch-norm layer's mean and inv_std
    average.begin()
    params, stats = [fused.read().copy()], [np.concatenate([host_copy(v).ravel() for v in average.stat_vars])]
    model.adjust_hyperp(0)
    for count in range(12):
        model.train_iter(count, Recorder(None))
        average.update(batches=2, epoch=0)  # a step of 2 workers' batches
        params.append(fused.read().copy())
        stats.append(np.concatenate([host_copy(v).ravel() for v in average.stat_vars]))
    np.testing.assert_allclose(average.params.values, reference(params, 0.9, 2), rtol=1e-10)
    np.testing.assert_allclose(average.stats.values, reference(stats, 0.9, 2), rtol=1e-10)

    own, own_stats = fused.read().copy(), stats[-1]
    before = validate(model, Recorder(None), MPI.COMM_SELF)
    with average.in_model(MPI.COMM_SELF):
        np.testing.assert_allclose(fused.read(), average.params.values, rtol=1e-6)
        averaged = validate(model, Recorder(None), MPI.COMM_SELF)
    np.testing.assert_array_equal(fused.read(), own)  # the model's own are back
    np.testing.assert_array_equal(np.concatenate([host_copy(v).ravel() for v in average.stat_vars]), own_stats)
    assert averaged["val_loss"] != before["val_loss"]

    state = average.state()
    resumed = WorkerAverage.for_worker(model, fused, OPTIONS)
    resumed.load(state)
    for a in (average, resumed):
        a.update(batches=2, epoch=0)
    np.testing.assert_array_equal(resumed.params.values, average.params.values)
    np.testing.assert_array_equal(resumed.stats.values, average.stats.values)
    assert WorkerAverage.for_worker(model, fused, SessionOptions(average_weights="none")) is None
