"""A JAX-mode rewrite: shape arithmetic stays concrete under ``jax.jit``.

Inside ``jax.jit`` the shape of every array is a Python int, but pytensor's JAX backend
computes with those ints through ``jax.numpy`` (fused elementwise nodes, casts, scalar
conversions), which turns them into traced values; JAX then refuses them wherever a shape
must be concrete ("Shapes must be 1D sequences of concrete values": the zeros of a
gradient, the ``-1`` of a reshape resolved against a batch whose size is known only at
run time -- a ResNet's global pooling, a dense layer's flatten). The rewrite here (tag
``theanompi_concrete_scalars``, JAX mode only, after fusion) wraps every node that maps
integer or boolean scalars to scalars in :class:`ConcreteWhenPossible`: under ``jit`` it
computes with NumPy when its inputs are concrete (shapes, constants) and as before when
they are traced (values that depend on the data).

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi.backend.compute import pytensor_mode
>>> x = pt.tensor("x", shape=(None, 4, 4))          # the batch size is known only when called
>>> loss = pt.sum(x.reshape((x.shape[0], -1)).mean(axis=1) ** 2)
>>> f = pytensor.function([x], pytensor.grad(loss, x), mode=pytensor_mode("jax"))
>>> f(np.ones((3, 4, 4), pytensor.config.floatX)).shape
(3, 4, 4)
"""

from __future__ import annotations

from pytensor.compile import optdb
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.scalar import ScalarType
from pytensor.tensor.type import TensorType

__all__ = ["TAG", "ConcreteWhenPossible"]

#: the rewrite's name (``mode.excluding(TAG)`` compiles without it)
TAG = "theanompi_concrete_scalars"


def _scalar(var) -> bool:
    return isinstance(var.type, ScalarType) or (isinstance(var.type, TensorType) and var.type.ndim == 0)


def _integral_scalar(var) -> bool:
    return _scalar(var) and str(var.type.dtype).startswith(("int", "uint", "bool"))


class ConcreteWhenPossible(Op):
    """``ConcreteWhenPossible(op)``: ``op``'s outputs; in JAX mode computed with NumPy when the inputs are concrete.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> n = pt.lscalar("n")
    >>> wrapped = ConcreteWhenPossible((n * 2).owner.op)
    >>> wrapped(n, pt.constant(2, dtype="int64")).type
    TensorType(int64, shape=())
    """

    __props__ = ("op",)

    def __init__(self, op: Op):
        self.op = op

    def inner_node(self, inputs) -> Apply:
        return self.op.make_node(*inputs)

    def make_node(self, *inputs):
        inner = self.inner_node(inputs)
        return Apply(self, list(inner.inputs), [out.type() for out in inner.outputs])

    def perform(self, node, inputs, output_storage):
        self.op.perform(self.inner_node(node.inputs), inputs, output_storage)

    def infer_shape(self, fgraph, node, shapes):
        return [() for _ in node.outputs]


@node_rewriter(None)
def concrete_scalar_arithmetic(fgraph, node):
    """Wrap a node mapping integer/boolean scalars to scalars (shape arithmetic) in :class:`ConcreteWhenPossible`."""
    if isinstance(node.op, ConcreteWhenPossible) or not node.inputs:
        return None
    if not all(_integral_scalar(v) for v in node.inputs) or not all(_scalar(v) for v in node.outputs):
        return None
    return ConcreteWhenPossible(node.op).make_node(*node.inputs).outputs


# after pytensor's last JAX rewrites (100) and merge3 (100): it sees the graph JAX compiles
optdb.register(TAG, dfs_rewriter(concrete_scalar_arithmetic), "jax", position=100.5)
