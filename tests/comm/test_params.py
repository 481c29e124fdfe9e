import numpy as np
import pytensor
import pytest

from theanompi.comm.fused_params import FlatLayout, FusedParams
from theanompi.core.errors import ContractError


def test_layout_pack_and_views_roundtrip():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in [(3, 5), (7,), (2, 1, 3)]]
    layout = FlatLayout([a.shape for a in arrays])
    assert layout.total == 15 + 7 + 6
    flat = layout.pack(arrays, np.empty(layout.total, "float32"))
    for a, v in zip(arrays, layout.views(flat)):
        np.testing.assert_array_equal(a, v)
    assert layout.views(flat)[1].base is not None  # a view, not a copy


def test_fused_params_read_write():
    params = [pytensor.shared(np.arange(6, dtype="float32").reshape(2, 3)), pytensor.shared(np.ones(3, "float32"))]
    fused = FusedParams(params)
    flat = fused.read()
    np.testing.assert_array_equal(flat, [0, 1, 2, 3, 4, 5, 1, 1, 1])
    fused.write(flat * 3)
    flat[:] = 0  # write() must have copied
    np.testing.assert_array_equal(params[0].get_value(), np.arange(6).reshape(2, 3) * 3)
    np.testing.assert_array_equal(params[1].get_value(), [3, 3, 3])


def test_mixed_dtypes_rejected():
    params = [pytensor.shared(np.ones(2, "float32"), name="a"), pytensor.shared(np.ones(2, "float64"), name="b")]
    with pytest.raises(ContractError, match="share one dtype"):
        FusedParams(params)


def test_non_finite_names_the_first_bad_param():
    params = [pytensor.shared(np.ones(3, "float32"), name="W"), pytensor.shared(np.ones(2, "float32"), name="b")]
    fused = FusedParams(params)
    flat = fused.read().copy()
    assert fused.non_finite(flat) is None
    flat[4] = np.nan
    assert fused.non_finite(flat) == "'b' (params[1])"
    flat[4] = 1.0
    flat[0] = -np.inf
    assert fused.non_finite(flat) == "'W' (params[0])"
    big = np.full(5, np.finfo("float32").max, "float32")  # the fast sum overflows; all values are finite
    assert fused.non_finite(big) is None
