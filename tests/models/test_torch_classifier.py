"""PyTorch models (theanompi.models.torch_classifier, theanompi.comm.param_access) in one process.
(At launch and under a real mpiexec: tests/sessions/test_torch.py.)"""

import doctest
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402

from theanompi.comm.fused_params import FusedParams  # noqa: E402
from theanompi.core.errors import ConfigError, ContractError  # noqa: E402
from theanompi.models.contract import WorkerConfig, check_model_instance  # noqa: E402
from theanompi.models.loader import load_model_class  # noqa: E402
from theanompi.session.recorder import Recorder  # noqa: E402

EXAMPLE = str(ROOT / "examples" / "torch_digits.py")


def digits_cnn(**model_options):
    cls = load_model_class(EXAMPLE, "DigitsCNN")
    return cls(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=model_options))


def test_example_docstring():
    module = sys.modules[load_model_class(EXAMPLE, "DigitsCNN").__module__]
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_models_torch_imports_the_real_torch():
    import theanompi.models.torch_classifier as ours

    assert ours.torch is torch and hasattr(ours.torch, "nn") and ours.__name__ == "theanompi.models.torch_classifier"


def test_fused_params_read_and_write_torch_tensors_in_place():
    model = digits_cnn()
    fused = FusedParams(model.params)
    pointers = [p.data_ptr() for p in model.params]
    flat = fused.read()
    expected = np.concatenate([p.detach().numpy().ravel() for p in model.params])
    np.testing.assert_array_equal(flat, expected)
    fused.write(flat * 2, scale=0.25)
    assert [p.data_ptr() for p in model.params] == pointers  # the module keeps its tensors
    np.testing.assert_allclose(fused.read(), expected * 0.5, rtol=1e-6)
    bad = flat.copy()
    bad[model.params[0].numel() + 3] = np.nan  # inside params[1]
    assert fused.non_finite(bad) == "'0.bias' (params[1])"


def test_cdd_split_step_equals_local_step_and_gradient_lands_in_one_buffer():
    a, b = digits_cnn(weight_decay=1e-3), digits_cnn(weight_decay=1e-3)
    a.compile_iter_fns("cdd")
    b.compile_iter_fns("local")
    check_model_instance(a, "cdd")
    rec = Recorder(None)
    for m in (a, b):
        m.adjust_hyperp(0)
    for count in range(5):
        vector = a.train_iter(count, rec)
        assert np.shares_memory(vector, a.params[0].grad.numpy()) and vector.flags.c_contiguous
        a.apply_update(vector)
        assert b.train_iter(count, rec) is None
    for p, q in zip(a.params, b.params):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert max(float((p - q0).detach().abs().max()) for p, q0 in zip(a.params, digits_cnn().params)) > 1e-3  # moved


def test_seed_builds_the_same_weights_on_every_rank():
    first, second = digits_cnn(), digits_cnn()
    for p, q in zip(first.params, second.params):
        assert torch.equal(p, q)
    cls = load_model_class(EXAMPLE, "DigitsCNN")
    other = cls(WorkerConfig(rank=1, size=2, seed=5, device="cpu1"))
    assert not torch.equal(first.params[0], other.params[0])


def test_options_checked_like_classifier_model():
    cls = load_model_class(EXAMPLE, "DigitsCNN")
    assert cls.validate_options({})["momentum"] == 0.9
    with pytest.raises(ConfigError, match="model option momentum=1.5 is not allowed"):
        cls.validate_options({"momentum": 1.5})
    with pytest.raises(ConfigError, match="unknown model option 'hidden'"):
        cls.validate_options({"hidden": 3})


def test_intra_op_threads_follow_the_rank_thread_count(monkeypatch):
    from theanompi.models.torch_classifier import set_intra_op_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert set_intra_op_threads() == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_sync_state_averages_batch_norm_statistics_over_workers():
    from theanompi.models.torch_classifier import TorchClassifierModel

    class WithBN(TorchClassifierModel):
        def build_data(self):
            x = np.zeros((8, 3), "float32")
            return self.shard(x, np.zeros(8, "int64"), x, np.zeros(8, "int64"))

        def build_network(self):
            return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))

    class OtherWorkerHasThreeTimesMine:  # stands in for a 2-worker communicator
        def allreduce(self, buffer):
            return buffer * 4

        def Get_size(self):
            return 2

    model = WithBN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    bn = model.network[1]
    bn.running_mean.fill_(1.0)
    pointer = bn.running_mean.data_ptr()
    model.sync_state(OtherWorkerHasThreeTimesMine())
    assert bn.running_mean.tolist() == [2.0] * 4 and bn.running_var.tolist() == [2.0] * 4
    assert bn.running_mean.data_ptr() == pointer and int(bn.num_batches_tracked) == 0  # in place; ints untouched


def test_params_of_two_kinds_break_the_contract():
    import pytensor

    model = digits_cnn()
    model.params = model.params + [pytensor.shared(np.zeros(2, "float32"))]
    with pytest.raises(ContractError, match="params mix pytensor shared variables and torch tensors"):
        check_model_instance(model)


def test_importing_theanompi_does_not_import_torch():
    code = ("import sys, theanompi, theanompi.runtime.worker_loop, theanompi.comm.fused_params, "
            "theanompi.models.contract, theanompi.rules, theanompi.models.base, theanompi.models.hyperparams; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "False"


def test_a_build_network_that_returns_no_module_is_a_contract_error():
    from theanompi.models.data.digits import load_digits_split
    from theanompi.models.torch_classifier import TorchClassifierModel

    class Layers(TorchClassifierModel):
        def build_data(self):
            (xt, yt), (xv, yv) = load_digits_split()
            return self.shard(xt, yt, xv, yv)

        def build_network(self):
            return [torch.nn.Linear(64, 10)]

    with pytest.raises(ContractError, match=r"Layers.build_network must return a torch.nn.Module .*not a list"):
        Layers(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))


def test_weight_decay_is_added_to_the_weights_gradients_by_their_hooks():
    decayed, plain = digits_cnn(weight_decay=0.01), digits_cnn()
    for m in (decayed, plain):
        m.compile_iter_fns("cdd")
        m.adjust_hyperp(0)
    with_decay = decayed.train_iter(0, Recorder(None))
    without = plain.train_iter(0, Recorder(None))
    offset = 0
    for p in plain.params:  # g + wd * p for the weights (2-D and up), g for the biases
        n = p.numel()
        decay = 0.01 * p.detach().numpy().ravel() if p.dim() > 1 else 0.0
        np.testing.assert_allclose(with_decay[offset:offset + n], without[offset:offset + n] + decay, rtol=1e-6,
                                   atol=1e-9)
        assert (p.dim() > 1) == (not np.array_equal(with_decay[offset:offset + n], without[offset:offset + n]))
        offset += n


def test_attached_reducer_starts_each_bucket_during_backward_with_its_final_gradient():
    from conftest import RecordingExchanger

    from theanompi.comm.exchange.overlap import OverlappedAllreduce, plan_buckets

    model, plain = digits_cnn(weight_decay=1e-3), digits_cnn(weight_decay=1e-3)
    for m in (model, plain):
        m.compile_iter_fns("cdd")
        m.adjust_hyperp(0)
    sizes = [p.numel() for p in model.params]  # 144 16 16384 64 640 10
    exchanger = RecordingExchanger(model.update_vector(), tests_to_finish=1000)
    reducer = OverlappedAllreduce(exchanger, plan_buckets(sizes, 4, bucket_bytes=4 * 1000))
    model.attach_reducer(reducer)
    rec = Recorder(None)
    for count in range(3):
        exchanger.started.clear(), exchanger.values.clear()
        vector = model.train_iter(count, rec)
        expected = plain.train_iter(count, rec)
        # reverse order: dense 2's W b with dense 1's b, then dense 1's W alone, then the conv's; final values each
        assert exchanger.started == [(16544, 17258), (160, 16544), (0, 160)]
        for (start, stop), values in zip(exchanger.started, exchanger.values):
            np.testing.assert_array_equal(values, expected[start:stop])
        assert reducer.finish() is reducer.buffer and reducer.overlapped == 3  # all three left during backward
        np.testing.assert_array_equal(vector, 2 * expected)  # the exchange summed into the model's own buffer
        model.apply_update(vector)
        plain.apply_update(2 * expected)
    for p, q in zip(model.params, plain.params):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_a_second_backward_in_one_step_is_refused_by_the_reducer():
    from conftest import RecordingExchanger

    from theanompi.comm.exchange.overlap import OverlappedAllreduce, plan_buckets

    model = digits_cnn()
    model.compile_iter_fns("cdd")
    model.attach_reducer(OverlappedAllreduce(RecordingExchanger(model.update_vector()),
                                             plan_buckets([p.numel() for p in model.params], 4, 1 << 20)))
    model.train_iter(0, Recorder(None))
    with pytest.raises(RuntimeError, match=r"params\[5\]'s gradient was reported final twice in one step"):
        model.train_iter(1, Recorder(None))
