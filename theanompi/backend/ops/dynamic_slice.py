"""Slices with computed bounds and a fixed length, for pytensor's JAX mode: ``x[i * b:(i + 1) * b]``.

JAX compiles only arrays of static shapes, so pytensor's JAX backend refuses a slice
whose bounds are computed from an input ("Slice entries must be static integers"),
which is exactly how a Theano-MPI model takes sub-batch ``i`` of its file batch
(``shared_x[subb_ind * batch_size:(subb_ind + 1) * batch_size]``). When the bounds'
difference is a constant, the slice has a static length after all. The rewrite here
(tag ``theanompi_dynamic_slice``, JAX mode only) finds that constant by reading both
bounds as integer affine forms -- sums of constants times variables, through adds,
subtractions, negations, multiplications by constants, casts and fused elementwise
nodes; any other node counts as one opaque variable, so ``x[f(i):f(i) + 4]`` works
too -- and replaces the slice by :class:`DynamicSlice`, which JAX runs as
``lax.dynamic_slice_in_dim``.

Semantics of :class:`DynamicSlice`: ``length`` elements starting at ``start`` along
``axis``; a negative ``start`` counts from the end, as in Python, and a start past
``n - length`` is moved back to ``n - length`` (JAX's rule: a slice that would run off
the end keeps its length, where NumPy would return fewer elements).

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> i = pt.iscalar("i")
>>> x = pt.matrix("x")
>>> fixed_length(slice(i * 3, (i + 1) * 3)), fixed_length(slice(i, 2 * i))
(3, None)
>>> f = pytensor.function([x, i], DynamicSlice(axis=0, length=2)(x, i))
>>> f(np.arange(8.0, dtype=pytensor.config.floatX).reshape(4, 2), 1).tolist()
[[2.0, 3.0], [4.0, 5.0]]
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.gradient import grad_not_implemented
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.tensor.basic import ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.subtensor import Subtensor, indices_from_subtensor
from pytensor.tensor.type import TensorType, discrete_dtypes

__all__ = ["TAG", "DynamicSlice", "fixed_length"]

#: the rewrite's name (``mode.excluding(TAG)`` compiles without it)
TAG = "theanompi_dynamic_slice"

_ONE = "1"  # the constant term's key in an affine form

Form = dict  # {variable or _ONE: coefficient}: sum of coefficient * variable, plus the constant at _ONE


class DynamicSlice(Op):
    """``DynamicSlice(axis, length)(x, start)``: ``length`` elements of ``x`` from ``start`` along ``axis``.

    Example
    -------
    >>> op = DynamicSlice(axis=1, length=4)
    >>> op.axis, op.length
    (1, 4)
    """

    __props__ = ("axis", "length")

    def __init__(self, axis: int, length: int):
        if int(axis) < 0 or int(length) < 0:
            raise ValueError(f"DynamicSlice: axis and length must be >= 0, got axis={axis!r}, length={length!r}")
        self.axis, self.length = int(axis), int(length)

    def make_node(self, x, start):
        x = pt.as_tensor_variable(x)
        start = pt.as_tensor_variable(start)
        if self.axis >= x.type.ndim:
            raise ValueError(f"DynamicSlice: axis {self.axis} is out of range for a {x.type.ndim}-d input")
        if start.type.ndim != 0 or start.type.dtype not in discrete_dtypes:
            raise TypeError(f"DynamicSlice: start must be an integer scalar, got {start.type}")
        shape = list(x.type.shape)
        shape[self.axis] = self.length
        return Apply(self, [x, start], [TensorType(x.type.dtype, shape=tuple(shape))()])

    def perform(self, node, inputs, output_storage):
        x, start = inputs
        n = x.shape[self.axis]
        if self.length > n:
            raise ValueError(f"DynamicSlice: cannot take {self.length} elements of an axis of {n}")
        begin = int(start) + n if int(start) < 0 else int(start)
        begin = min(max(begin, 0), n - self.length)
        index = [slice(None)] * x.ndim
        index[self.axis] = slice(begin, begin + self.length)
        output_storage[0][0] = np.array(x[tuple(index)])

    def infer_shape(self, fgraph, node, shapes):
        shape = list(shapes[0])
        shape[self.axis] = pt.constant(self.length, dtype="int64")
        return [tuple(shape)]

    def grad(self, inputs, output_grads):  # the rewrite runs after pytensor.grad: no gradient is ever asked
        return [grad_not_implemented(self, 0, inputs[0]), grad_not_implemented(self, 1, inputs[1])]


# ----- reading integer bounds as affine forms ------------------------------------------------------------
def _constant(var) -> Fraction | None:
    if not isinstance(var, Constant):
        return None
    data = np.asarray(var.data)
    if data.ndim != 0 or data.dtype.kind not in "iub":
        return None
    return Fraction(int(data))


def _combine(op, forms: list[Form]) -> Form | None:
    """The form of a scalar op applied to affine forms; None where the result is not affine."""
    if isinstance(op, ps.Add):
        out: Form = {}
        for form in forms:
            for key, coef in form.items():
                out[key] = out.get(key, 0) + coef
        return out
    if isinstance(op, ps.Sub):
        a, b = forms
        return _combine(ps.add, [a, {k: -c for k, c in b.items()}])
    if isinstance(op, ps.Neg):
        return {k: -c for k, c in forms[0].items()}
    if isinstance(op, ps.Mul):
        out = {_ONE: Fraction(1)}
        for form in forms:
            if set(form) <= {_ONE}:
                out = {k: c * form.get(_ONE, 0) for k, c in out.items()}
            elif set(out) <= {_ONE}:
                out = {k: c * out.get(_ONE, 0) for k, c in form.items()}
            else:
                return None
        return out
    if isinstance(op, ps.Cast | ps.Identity) and len(forms) == 1:
        return forms[0]
    return None


def _composite_form(outer, forms: list[Form], output: int) -> Form:
    """Output ``output`` of the fused elementwise node ``outer``, read through its inner scalar graph; an inner
    node that is not affine counts as an opaque variable of this node."""
    graph = outer.op.scalar_op.fgraph
    known: dict = dict(zip(graph.inputs, forms))
    for node in graph.toposort():
        inner = [known[v] if v in known else {_ONE: c} if (c := _constant(v)) is not None else None
                 for v in node.inputs]
        forms_in = [f for f in inner if f is not None]
        form = _combine(node.op, forms_in) if len(forms_in) == len(inner) and len(node.outputs) == 1 else None
        for out in node.outputs:
            known[out] = form if form is not None else {(outer, out): Fraction(1)}
    return known[graph.outputs[output]]


def affine_form(var: Variable) -> Form:
    """``var`` (an integer scalar) as an affine form of the opaque variables it is computed from."""
    value = _constant(var)
    if value is not None:
        return {_ONE: value}
    node = var.owner
    if node is None:
        return {var: Fraction(1)}
    op = node.op
    if isinstance(op, ScalarFromTensor | TensorFromScalar) or (isinstance(op, DimShuffle) and op.input_ndim == 0):
        return affine_form(node.inputs[0])
    scalar_op = op.scalar_op if isinstance(op, Elemwise) else op if isinstance(op, ps.ScalarOp) else None
    if scalar_op is not None:
        forms = [affine_form(v) for v in node.inputs]
        if isinstance(scalar_op, ps.Composite) and isinstance(op, Elemwise):
            return _composite_form(node, forms, node.outputs.index(var))
        form = _combine(scalar_op, forms)
        if form is not None:
            return form
    return {var: Fraction(1)}


def fixed_length(index: slice) -> int | None:
    """The length of ``index`` (a slice of pytensor integer scalars or None) when its bounds are not both
    constants but always differ by the same non-negative integer; else None."""
    start, stop, step = (pt.as_tensor_variable(v) if v is not None and not isinstance(v, Variable) else v
                         for v in (index.start, index.stop, index.step))  # Python ints as constants
    if step is not None and _constant(step) != 1:
        return None
    start = start if start is not None else pt.constant(0)
    if stop is None or (_constant(start) is not None and _constant(stop) is not None):
        return None
    diff = _combine(ps.sub, [affine_form(stop), affine_form(start)])
    if diff is None or any(coef != 0 for key, coef in diff.items() if key is not _ONE):
        return None
    length = diff.get(_ONE, Fraction(0))
    return int(length) if length.denominator == 1 and length >= 0 else None


def _whole(index) -> bool:
    return isinstance(index, slice) and index.start is None and index.stop is None and index.step is None


# ----- the rewrite ------------------------------------------------------------------------------------------
@node_rewriter([Subtensor])
def dynamic_slice_of_fixed_length(fgraph, node):
    """``x[a:b]`` with computed bounds of a constant difference -> :class:`DynamicSlice` (JAX mode only)."""
    x = node.inputs[0]
    out, rest, changed = x, [], False
    for axis, index in enumerate(indices_from_subtensor(node.inputs[1:], node.op.idx_list)):
        length = fixed_length(index) if isinstance(index, slice) else None
        if length is None:
            rest.append(index)
            continue
        start = index.start if index.start is not None else pt.constant(0, dtype="int64")
        out = DynamicSlice(axis, length)(out, pt.as_tensor_variable(start))
        rest.append(slice(None))
        changed = True
    if not changed:
        return None
    if not all(_whole(index) for index in rest):
        out = out[tuple(rest)]
    return [out]


# before pytensor's shape inference (ShapeOpt, 0.1): every shape computed from the slice is then the static
# length (e.g. ``arange(y.shape[0])`` and the gradient's zeros, which JAX needs constant, use 32)
optdb.register(TAG, dfs_rewriter(dynamic_slice_of_fixed_length), "jax", position=0.095)
