"""Momentum SGD for all of a model's parameters as one Op (one graph node, one call per step).

``momentum_sgd(params, velocities, grads, lr, momentum)`` returns the new
parameters and velocities::

    v_new = momentum * v - lr * g        p_new = p + v_new

(``momentum * v`` and the difference in float64, ``lr * g`` in the parameter's
dtype, the result rounded to it: the arithmetic of the per-parameter graph.)
Written per parameter, these are fused elementwise nodes, one per parameter:
ResNet-20's 59 parameters gave 59 C modules to build, 59 thunks every rank links
on every start (~1 ms each) and graphs pytensor rewrites on every compile. As one
node they cost one Python thunk; NumPy does the arithmetic (~0.3 ms a step for
ResNet-20, whose step takes ~200 ms). It has no C code on purpose: pytensor's C
wrapper for an op with 177 inputs is 1.5 MB of C++ that g++ needs ~80 s to build.

A rewrite (tag ``theanompi_inplace_momentum``, in pytensor's inplace phase) lets
the op overwrite the parameters and velocities in their shared storage, as
pytensor's own inplace elementwise updates do, wherever pytensor's destroy
handler allows it.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> p = pytensor.shared(np.ones(2, "float32"), name="p"); v = pytensor.shared(np.zeros(2, "float32"), name="v")
>>> g = pt.vector("g", dtype="float32"); lr = np.float32(0.5)
>>> (p_new,), (v_new,) = momentum_sgd([p], [v], [g], lr, momentum=0.9)
>>> step = pytensor.function([g], [], updates=[(p, p_new), (v, v_new)])
>>> step(np.ones(2, "float32")); step(np.ones(2, "float32"))
[]
[]
>>> [round(float(a), 4) for a in (v.get_value()[0], p.get_value()[0])]   # v: -0.5, then 0.9 * -0.5 - 0.5
[-0.95, -0.45]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.gradient import grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import WalkingGraphRewriter, node_rewriter

from theanompi.backend.ops._common import FLOAT_DTYPES

__all__ = ["MomentumSGD", "momentum_sgd", "INPLACE_TAG"]

#: the rewrite that makes the op update in place (``mode.excluding(INPLACE_TAG)`` keeps it out)
INPLACE_TAG = "theanompi_inplace_momentum"


class MomentumSGD(Op):
    """``MomentumSGD(n, momentum)(lr, p_1..p_n, v_1..v_n, g_1..g_n)`` -> (p_1'..p_n', v_1'..v_n').

    Example
    -------
    >>> op = MomentumSGD(2, 0.9)
    >>> op.n, op.momentum, op.inplace, MomentumSGD(2, 0.9, inplace=True).destroy_map
    (2, 0.9, False, {0: [1], 1: [2], 2: [3], 3: [4]})
    """

    __props__ = ("n", "momentum", "inplace")

    def __init__(self, n: int, momentum: float, inplace: bool = False):
        if int(n) < 1:
            raise ValueError(f"momentum_sgd: needs at least one parameter, got n={n!r}")
        if not np.isfinite(float(momentum)):
            raise ValueError(f"momentum_sgd: momentum must be a finite number, got {momentum!r}")
        self.n, self.momentum, self.inplace = int(n), float(momentum), bool(inplace)
        if self.inplace:  # output k overwrites input k + 1 (the inputs after lr: params, then velocities)
            self.destroy_map = {k: [k + 1] for k in range(2 * self.n)}

    def make_node(self, lr, *tensors):
        if len(tensors) != 3 * self.n:
            raise ValueError(f"momentum_sgd: expected {self.n} params, velocities and gradients "
                             f"({3 * self.n} tensors), got {len(tensors)}")
        lr = pt.as_tensor_variable(lr)
        if lr.ndim != 0 or lr.dtype not in FLOAT_DTYPES:
            raise ValueError(f"momentum_sgd: lr must be a float scalar, got {lr.type}")
        tensors = [pt.as_tensor_variable(t) for t in tensors]
        params, velocities, grads = (tensors[k * self.n:(k + 1) * self.n] for k in range(3))
        for k, (p, v, g) in enumerate(zip(params, velocities, grads)):
            if p.dtype not in FLOAT_DTYPES or v.type != p.type or g.dtype != p.dtype or g.ndim != p.ndim:
                raise ValueError(f"momentum_sgd: parameter {k} ({p.name or p.type}): the velocity must have the "
                                 f"parameter's type and the gradient its dtype and ndim, got {p.type}, {v.type}, "
                                 f"{g.type}")
        return Apply(self, [lr, *tensors], [p.type() for p in params] + [v.type() for v in velocities])

    def perform(self, node, inputs, output_storage):
        lr, *tensors = inputs
        n = self.n
        for k in range(n):
            p, v, g = tensors[k], tensors[n + k], tensors[2 * n + k]
            if p.shape != v.shape or p.shape != g.shape:
                raise ValueError(f"momentum_sgd: parameter {k}, its velocity and its gradient must have one shape, "
                                 f"got {p.shape}, {v.shape}, {g.shape}")
            if not self.inplace:
                p, v = p.copy(), v.copy()
            step = np.multiply(v, self.momentum, dtype=np.float64)
            step -= np.multiply(g, np.asarray(lr, dtype=p.dtype))
            np.copyto(v, step, casting="same_kind")
            p += v
            output_storage[k][0], output_storage[n + k][0] = p, v

    def infer_shape(self, fgraph, node, input_shapes):
        return list(input_shapes[1:2 * self.n + 1])

    def pullback(self, inputs, outputs, cotangents):
        return [grad_not_implemented(self, k, v, "the gradient of an optimizer step") for k, v in enumerate(inputs)]


def momentum_sgd(params: Sequence, velocities: Sequence, grads: Sequence, lr, momentum: float):
    """(new params, new velocities) of one momentum-SGD step, as one :class:`MomentumSGD` node.

    Each gradient is cast to its parameter's dtype; ``lr`` to the first parameter's.
    """
    params, velocities, grads = list(params), list(velocities), list(grads)
    if not (len(params) == len(velocities) == len(grads)):
        raise ValueError(f"momentum_sgd: {len(params)} params, {len(velocities)} velocities and "
                         f"{len(grads)} gradients; they must pair up")
    grads = [pt.cast(g, p.dtype) for p, g in zip(params, grads)]
    lr = pt.cast(lr, params[0].dtype) if params else lr
    outs = MomentumSGD(len(params), momentum)(lr, *params, *velocities, *grads)
    assert isinstance(outs, list)  # two outputs per parameter: never a single variable
    return outs[:len(params)], outs[len(params):]


@node_rewriter([MomentumSGD], inplace=True)
def inplace_momentum(fgraph, node):
    """Let the op overwrite the parameters and velocities (where the destroy handler allows it)."""
    if node.op.inplace:
        return False
    return MomentumSGD(node.op.n, node.op.momentum, inplace=True)(*node.inputs)


optdb.register(INPLACE_TAG, WalkingGraphRewriter(inplace_momentum, failure_callback=WalkingGraphRewriter.warn_inplace),
               "fast_run", "inplace", position=50.3)
