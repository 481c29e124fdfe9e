"""TheanoMPIModel, the adapter of a model written for Theano-MPI: it keeps Theano-MPI's loop order and sub-batches.
(Such models in sessions under a real mpiexec: tests/sessions/test_theanompi_compat.py.)"""

from theanompi.models.contract import WorkerConfig
from theanompi.models.theano_mpi_adapter import TheanoMPIModel
from theanompi.session.recorder import Recorder


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


def test_theanompis_gpu_sync_line_gets_a_one_line_fix():
    """Theano-MPI's ImageNet models call ``p.container.value.sync()`` (a pygpu array's method) after each step;
    on pytensor's numpy values that line fails, and the error says to delete it. Other AttributeErrors pass."""
    import numpy as np
    import pytensor
    import pytest

    from theanompi.core.errors import ContractError

    class SyncsTheGPU(_FakeTheanoMPIModel):
        def __init__(self):
            super().__init__()
            self.params = [pytensor.shared(np.zeros(2, "float32"))]

        def train_iter(self, count, recorder):
            for p in self.params:
                p.container.value.sync()

    model = TheanoMPIModel(SyncsTheGPU(), WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    with pytest.raises(ContractError) as err:
        model.train_iter(0, Recorder(None))
    assert str(err.value) == (
        "ModelClass 'SyncsTheGPU': train_iter calls .sync() on a parameter's value (Theano-MPI's 'for p in "
        "self.params: p.container.value.sync()', which waited for the GPU); pytensor keeps parameters in numpy "
        "arrays, which have no sync: delete that line")

    class Broken(_FakeTheanoMPIModel):
        def train_iter(self, count, recorder):
            return self.no_such_attribute

    with pytest.raises(AttributeError, match="no_such_attribute"):
        TheanoMPIModel(Broken(), WorkerConfig(rank=0, size=1, seed=0, device="cpu0")).train_iter(0, Recorder(None))
