"""Convolution, pooling, fused batch-norm and momentum-SGD Ops for pytensor (NCHW, float32/float64).

Example
-------
>>> from theanompi.backend.pytensor_config import configure_pytensor
>>> _ = configure_pytensor()                          # doctest: +SKIP
>>> import pytensor.tensor as pt
>>> from theanompi.backend.ops import conv2d, max_pool2d
>>> x = pt.tensor4("x"); W = pt.tensor4("W")
>>> h = max_pool2d(pt.maximum(conv2d(x, W, pad=1), 0), 2)

Their JAX implementations are registered by ``theanompi.backend.compute.pytensor_mode("jax")``; code that
compiles them with pytensor's ``mode="JAX"`` itself calls
:func:`theanompi.backend.ops.jax_dispatch.register` first (importing jax costs ~1 s, so C-mode ranks
never do).
"""

from theanompi.backend.ops.batch_norm import (
    BatchNormInfer,
    BatchNormTrain,
    BatchNormTrainGrad,
    batch_norm_infer,
    batch_norm_train,
)
from theanompi.backend.ops.concrete_scalars import ConcreteWhenPossible  # registers the JAX-mode rewrite
from theanompi.backend.ops.conv import (
    Conv2d,
    Conv2dGradBias,
    Conv2dGradInputs,
    Conv2dGradWeights,
    conv2d,
)
from theanompi.backend.ops.dynamic_slice import DynamicSlice  # registers the JAX-mode rewrite
from theanompi.backend.ops.momentum import MomentumSGD, momentum_sgd
from theanompi.backend.ops.pool import Pool2d, Pool2dGrad, avg_pool2d, max_pool2d
from theanompi.backend.ops.softmax_inline import inline_softmax  # registers the rewrite

__all__ = [
    "BatchNormInfer",
    "ConcreteWhenPossible",
    "BatchNormTrain",
    "BatchNormTrainGrad",
    "Conv2d",
    "Conv2dGradBias",
    "Conv2dGradInputs",
    "Conv2dGradWeights",
    "DynamicSlice",
    "MomentumSGD",
    "Pool2d",
    "Pool2dGrad",
    "avg_pool2d",
    "batch_norm_infer",
    "batch_norm_train",
    "conv2d",
    "inline_softmax",
    "max_pool2d",
    "momentum_sgd",
]
