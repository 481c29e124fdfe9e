"""The compressors' pieces in one process: the 16-bit codecs against independent roundings, PowerSGD's plan and its
one-worker arithmetic, state and reset, and the checks of BSP_COMPRESSION against the strategy.
(Against NumPy replays on several ranks: tests/sessions/test_bsp_compression.py.)"""

import ml_dtypes
import numpy as np
import pytest

from theanompi.comm.compression import check_compression, compression_of, make_compressor, wire_codec
from theanompi.comm.compression.powersgd import PowerSGD, plan_matrices
from theanompi.comm.exchange import make_exchanger
from theanompi.comm.exchange.base import Exchanger
from theanompi.comm.exchange.fp16 import BF16, FP16, payload_bytes_16, scale_exponent
from theanompi.core.errors import ConfigError, ContractError
from theanompi.core.session_options import BSPOptions


class Solo(Exchanger):
    """One worker: a sum is the buffer itself; counts the sums it was asked for."""

    size = 1

    def __init__(self):
        self.sums = []

    def allreduce_sum(self, buf):
        self.sums.append(buf.size)
        return buf

    def bcast(self, buf, root=0):
        return buf


def log_uniform(n, decades, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 10.0 ** -rng.uniform(0, decades, n)).astype(np.float32)


def test_bf16_rounds_as_ml_dtypes_does_ties_to_even_included():
    x = np.concatenate([log_uniform(100_000, 30), np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8, -0.0, 3e38, 1e-40])])
    bits = np.empty(x.size, np.uint16)
    BF16.encode(x, bits, np)
    np.testing.assert_array_equal(BF16.decode(bits, np), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert BF16.decode(bits, np)[-5:-3].tolist() == [1.0, 1 + 4 * 2 ** -8]  # ties go to the even neighbour


@pytest.mark.parametrize("bad", [np.nan, np.inf, 3.4e38])
def test_bf16_refuses_what_it_cannot_carry(bad):
    with pytest.raises(FloatingPointError, match="bf16 exchange: a buffer holds NaN/Inf"):
        BF16.encode(np.float32([1.0, bad]), np.empty(2, np.uint16), np)


@pytest.mark.parametrize("peak", [1e-30, 3e-7, 1.0, 65504.0, 1e5, 3e38])
def test_fp16_scale_keeps_every_message_in_range_with_fp16_precision(peak):
    x = log_uniform(10_000, 6, seed=int(np.log10(peak) + 40))
    x = (x / np.abs(x).max()).astype(np.float64) * peak  # magnitudes from peak down to 1e-6 peak
    x = x.astype(np.float32)
    wire = np.empty(x.size + 1, np.float16)
    FP16.encode(x, wire, np)
    k = int(wire[-1])
    assert 2 ** 14 <= np.abs(x).max() * 2.0 ** k < 2 ** 15 and np.isfinite(wire).all()
    back = FP16.decode(wire, np).astype(np.float64)
    bound = 2 ** -11 * np.abs(x) + FP16.subnormal_error(float(np.abs(x).max()))
    assert np.all(np.abs(back - x) <= bound)


def test_fp16_refuses_nan_and_inf():
    with pytest.raises(FloatingPointError, match="fp16 exchange"):
        FP16.encode(np.float32([1.0, np.inf]), np.empty(3, np.float16), np)


def test_scale_exponent_is_clamped():
    assert (scale_exponent(2.0 ** -140), scale_exponent(2.0 ** 127)) == (120, -113)


def test_16_bit_payload_is_half_the_fp32_ring_and_one_element_per_fp16_message():
    n, count = 4, 1_000_003
    fp32 = 2 * (n - 1) * count * 4 // n
    for rank in range(n):
        assert abs(payload_bytes_16(count, n, rank, BF16) - fp32 / 2) <= 2 * 2 * (n - 1)  # chunks differ by 1
        assert payload_bytes_16(count, n, rank, FP16) - payload_bytes_16(count, n, rank, BF16) == 2 * 2 * (n - 1)


def test_plan_matrices_views_ndim_2_and_more_as_first_axis_by_the_rest():
    matrices, whole = plan_matrices([(8,), (16, 3, 3, 3), (4, 4), (1, 100), (100, 30)], rank=2)
    assert [(m.rows, m.cols, m.rank, m.p_offset, m.q_offset) for m in matrices] == [(16, 27, 2, 0, 0),
                                                                                    (100, 30, 2, 32, 54)]
    assert whole == [(0, 8), (440, 556)]  # the bias, then 4x4 and 1x100: their factors would not be smaller


def test_powersgd_on_one_worker_projects_onto_one_power_iteration_with_error_feedback():
    shapes = [(30, 20), (20,)]
    solo = Solo()
    compressor = PowerSGD(solo, shapes, rank=3, start_iter=1, seed=7)
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(620).astype(np.float32) for _ in range(3)]
    out = compressor.allreduce_sum(grads[0].copy(), iteration=0)  # before start_iter: the sum itself
    np.testing.assert_array_equal(out, grads[0])
    assert compressor.state() == {} and solo.sums == [620]
    q = np.random.default_rng(7).standard_normal((20, 3)).astype(np.float32).astype(np.float64)
    error = np.zeros((30, 20))
    for step, grad in enumerate(grads[1:], start=1):
        out = compressor.allreduce_sum(grad.copy(), iteration=step)
        m = grad[:600].reshape(30, 20).astype(np.float64) + error
        basis, _ = np.linalg.qr(m @ q)
        q = m.T @ basis
        error = m - basis @ q.T
        np.testing.assert_allclose(out[:600], (basis @ q.T).ravel(), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out[600:], grad[600:])  # the vector goes whole
        np.testing.assert_allclose(compressor.state()["powersgd_error"], error.ravel(), rtol=1e-4, atol=1e-5)
    assert solo.sums == [620, 30 * 3 + 20, 20 * 3, 30 * 3 + 20, 20 * 3]  # then: the Ps and the vector, the Qs


def test_powersgd_state_loads_resets_and_refuses_another_shape():
    compressor = PowerSGD(Solo(), [(10, 8)], rank=2, start_iter=0, seed=0)
    compressor.allreduce_sum(np.ones(80, np.float32), iteration=0)
    state = compressor.state()
    other = PowerSGD(Solo(), [(10, 8)], rank=2, start_iter=0, seed=0)
    other.load_state(state)
    probe = np.arange(80, dtype=np.float32)
    np.testing.assert_array_equal(compressor.allreduce_sum(probe.copy(), 1), other.allreduce_sum(probe.copy(), 1))
    compressor.reset()
    assert not compressor.state()["powersgd_error"].any()
    fresh = PowerSGD(Solo(), [(10, 8)], rank=2, start_iter=0, seed=0)
    fresh.reset()
    np.testing.assert_array_equal(compressor.state()["powersgd_q"], fresh.state()["powersgd_q"])
    with pytest.raises(ContractError, match="BSP_POWERSGD_RANK and the model give"):
        PowerSGD(Solo(), [(10, 8)], rank=3, start_iter=0, seed=0).load_state(state)


def test_ar16_is_fp16_compression_and_the_compressor_follows_the_options():
    assert compression_of(BSPOptions(exch_strategy="ar16")) == "fp16"
    assert wire_codec(BSPOptions(compression="bf16")) == "bf16" and wire_codec(BSPOptions()) is None
    plain = make_compressor(BSPOptions(exch_strategy="ar16"), Solo(), [(3,)], np.float32)
    assert plain.name == "fp16" and plain.state() == {}
    assert isinstance(make_compressor(BSPOptions(compression="powersgd"), Solo(), [(3, 3)], np.float32), PowerSGD)


@pytest.mark.parametrize(("strategy", "compression", "message"), [
    ("ar16", "powersgd", "BSP_COMPRESSION=powersgd with BSP_EXCH_STRATEGY=ar16: ar16 is fp16 compression already "
                         "(ar with BSP_COMPRESSION=fp16); use BSP_EXCH_STRATEGY=ar"),
    ("nccl16", "bf16", "BSP_COMPRESSION=bf16 with BSP_EXCH_STRATEGY=nccl16: nccl16 is fp16 compression already "
                       "(nccl32 with BSP_COMPRESSION=fp16); use BSP_EXCH_STRATEGY=nccl32"),
    ("nccl32", "fp16", "BSP_COMPRESSION=fp16 with BSP_EXCH_STRATEGY=nccl32: compression runs over the host strategy "
                       "ar (fp16 between GPUs: BSP_EXCH_STRATEGY=nccl16); use BSP_EXCH_STRATEGY=ar or "
                       "BSP_COMPRESSION=none"),
    ("cudampi", "powersgd", "BSP_COMPRESSION=powersgd with BSP_EXCH_STRATEGY=cudampi: compression runs over the "
                            "host strategy ar; use BSP_EXCH_STRATEGY=ar or BSP_COMPRESSION=none"),
])
def test_compression_that_the_strategy_cannot_carry_is_one_line(strategy, compression, message):
    with pytest.raises(ConfigError) as err:
        check_compression(BSPOptions(exch_strategy=strategy, compression=compression))
    assert str(err.value) == message


@pytest.mark.parametrize(("strategy", "compression"), [("ar", "none"), ("ar", "powersgd"), ("ar16", "fp16"),
                                                       ("nccl16", "none"), ("nccl32", "none")])
def test_compression_that_fits_the_strategy_passes(strategy, compression):
    check_compression(BSPOptions(exch_strategy=strategy, compression=compression))


def test_make_exchanger_refuses_a_codec_the_strategy_cannot_send():
    with pytest.raises(ConfigError, match="BSP_EXCH_STRATEGY='nccl32' cannot send bf16"):
        make_exchanger("nccl32", comm=None, half="bf16")
