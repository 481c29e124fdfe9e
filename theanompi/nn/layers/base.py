"""Base classes of the layer library: :class:`Layer` and :class:`MergeLayer`.

A layer knows its input layer(s) (or only an input shape), its parameters
(pytensor shared variables registered with tags by :meth:`Layer.add_param`),
how to compute its output shape (:meth:`Layer.get_output_shape_for`) and its
output expression (:meth:`Layer.get_output_for`). Networks are evaluated by
:func:`theanompi.nn.get_output`, exactly as in Lasagne.

Example
-------
>>> import pytensor.tensor as pt
>>> from theanompi.nn import Layer, InputLayer, get_output
>>> class Double(Layer):
...     def get_output_for(self, input, **kwargs):
...         return 2 * input
>>> net = Double(InputLayer((None, 3)))
>>> net.output_shape
(None, 3)
"""

from __future__ import annotations

import itertools
import numbers
import warnings
from collections import OrderedDict

import numpy as np
import pytensor
import pytensor.tensor
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.tensor.type import TensorType

from theanompi.nn.utils import collect_shared_vars

#: Creation order of state updates (``get_state_updates`` lists them in this order).
_UPDATE_ORDER = itertools.count()

__all__ = ["Layer", "MergeLayer", "attach_update", "create_param", "describe", "incoming_shape", "set_state_update"]


def describe(spec) -> str:
    """``type value`` of a bad argument for an error message, at most 200 characters."""
    return f"{type(spec).__name__} {spec!r}"[:200]


def _check_param_shape(shape, name):
    shape = tuple(shape)
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
        raise ValueError(
            f"cannot create param {name!r} with shape {shape}: every dimension must be a known "
            "positive int (give the input layer a shape without None in the dimensions this layer needs)"
        )
    if any(s <= 0 for s in shape):
        raise ValueError(f"cannot create param {name!r} with a non-positive dimension in shape {shape}")
    return shape


def create_param(spec, shape, name=None):
    """A parameter of ``shape`` from ``spec`` (Lasagne's ``create_param``).

    Parameters
    ----------
    spec : numpy array, number, pytensor expression or callable
        An array (or number) becomes a new shared variable of its dtype, with
        the static shape ``shape`` (its shape must be ``shape``). A pytensor
        expression -- a shared variable or any symbolic expression, a
        *symbolic parameter* -- is used as it is (its number of dimensions must
        match; a shared variable's value must have ``shape``) and named ``name``
        if it has no name. A callable ``spec(shape)`` (an
        :mod:`~theanompi.nn.init` initializer) gives one of those.
    shape : iterable of int
        The parameter's shape; every entry a positive int.
    name : str, optional

    Raises
    ------
    ValueError
        For a non-positive or unknown dimension, or a wrong shape or ndim.
    TypeError
        For a ``spec`` (or the value a callable returned) of another kind.

    Example
    -------
    >>> from theanompi.nn import init
    >>> create_param(init.Constant(1.0), (2, 3), "W").get_value().shape
    (2, 3)
    """
    shape = _check_param_shape(shape, name)
    what = "spec"
    if callable(spec) and not isinstance(spec, pytensor.graph.basic.Variable):
        spec, what = spec(shape), "value returned by the initializer"
    if isinstance(spec, (numbers.Number, np.generic, list, tuple)):
        spec = np.asarray(spec)
    if isinstance(spec, np.ndarray):
        if spec.shape != shape:
            raise ValueError(f"array given for param {name!r} has shape {spec.shape}, expected {shape}")
        return pytensor.shared(spec, name=name, shape=shape)
    if isinstance(spec, pytensor.graph.basic.Variable):
        ndim = getattr(spec, "ndim", None)
        if ndim != len(shape):
            raise ValueError(f"param {name!r}: the expression {spec} given has {ndim} dimensions, expected "
                             f"{len(shape)} (shape {shape})")
        if isinstance(spec, SharedVariable):
            actual = tuple(np.shape(spec.get_value(borrow=True)))
            if actual != shape:
                raise ValueError(f"param {name!r}: the shared variable {spec.name!r} given has shape {actual}, "
                                 f"expected {shape}")
        if not spec.name:
            spec.name = name
        return spec
    raise TypeError(f"cannot create param {name!r} from the {what}, {describe(spec)}: expected a numpy array, "
                    "a pytensor expression or an initializer")


def incoming_shape(incoming, who):
    """``(shape, layer)`` of one incoming: a shape tuple (no layer), or anything with ``output_shape`` (duck typing).

    Example
    -------
    >>> incoming_shape((None, 3), "DenseLayer")
    ((None, 3), None)
    """
    if isinstance(incoming, tuple):
        return incoming, None
    if not hasattr(incoming, "output_shape"):
        raise ValueError(f"{who}: an incoming must be a layer (anything with output_shape) or a shape tuple, "
                         f"got {describe(incoming)}")
    return incoming.output_shape, incoming


def _check_static_shape(layer, shape):
    """``shape`` if no entry is symbolic (Lasagne refuses symbolic output shapes), else ValueError."""
    if any(isinstance(s, pytensor.graph.basic.Variable) for s in shape):
        raise ValueError(f"{type(layer).__name__}.get_output_shape_for returned a symbolic output shape {shape!r}; "
                         "shapes must be tuples of ints and None (for sizes unknown until run time)")
    return shape


class Layer:
    """Base class of all layers with one input.

    Parameters
    ----------
    incoming : Layer or tuple
        The layer feeding this one (any object with ``output_shape``), or the
        shape of its input (then :func:`get_output` needs the input expression
        for this layer).
    name : str, optional
        Prefixes the names of this layer's parameters (``"name.W"``).

    Attributes
    ----------
    input_layer : Layer or None
    input_shape : tuple
    params : OrderedDict
        Parameter -> set of tags (``trainable``, ``regularizable``, ...).

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> DenseLayer(InputLayer((None, 4)), 3).output_shape
    (None, 3)
    """

    def __init__(self, incoming, name=None):
        self.input_shape, self.input_layer = incoming_shape(incoming, type(self).__name__)
        self.name = name
        self.params = OrderedDict()
        self.get_output_kwargs = []
        if any(d is not None and not isinstance(d, pytensor.graph.basic.Variable) and d <= 0
               for d in self.input_shape):
            raise ValueError(f"{type(self).__name__}: cannot create layer {name!r} with a non-positive "
                             f"input shape {self.input_shape}")

    @property
    def output_shape(self):
        """The shape of this layer's output (None for a dimension unknown at build time)."""
        return _check_static_shape(self, self.get_output_shape_for(self.input_shape))

    def get_params(self, unwrap_shared=True, **tags):
        """This layer's parameters, filtered by tags.

        ``tag=True`` keeps only parameters with that tag, ``tag=False`` only
        parameters without it (e.g. ``trainable=True, regularizable=False``).
        ``unwrap_shared=True`` gives the shared variables that symbolic
        parameters depend on in their place; False gives the expressions.
        """
        result = list(self.params.keys())
        only = {t for t, v in tags.items() if v}
        exclude = {t for t, v in tags.items() if not v}
        if only:
            result = [p for p in result if not (only - self.params[p])]
        if exclude:
            result = [p for p in result if not (self.params[p] & exclude)]
        return collect_shared_vars(result) if unwrap_shared else result

    def get_output_shape_for(self, input_shape):
        """Output shape for ``input_shape``; the default keeps the shape."""
        return input_shape

    def get_output_for(self, input, **kwargs):
        """The output expression for the input expression ``input``."""
        raise NotImplementedError

    def add_param(self, spec, shape, name=None, **tags):
        """Create a parameter (see :func:`create_param`), register it with tags, return it.

        Tags ``trainable`` and ``regularizable`` default to True.
        """
        if name is not None and self.name is not None:
            name = f"{self.name}.{name}"
        param = create_param(spec, shape, name)
        tags.setdefault("trainable", True)
        tags.setdefault("regularizable", True)
        self.params[param] = {tag for tag, value in tags.items() if value}
        return param

    def __repr__(self):
        label = f" {self.name!r}" if self.name else ""
        return f"<{type(self).__name__}{label}>"


class MergeLayer(Layer):
    """Base class of layers with several inputs.

    Parameters
    ----------
    incomings : sequence of Layer or tuple
        The layers feeding this one (anything with ``output_shape``), or their output shapes.
    name : str, optional

    Example
    -------
    >>> from theanompi.nn import InputLayer, ElemwiseSumLayer
    >>> a, b = InputLayer((None, 2)), InputLayer((None, 2))
    >>> ElemwiseSumLayer([a, b]).output_shape
    (None, 2)
    """

    def __init__(self, incomings, name=None):
        incomings = list(incomings)
        shapes_layers = [incoming_shape(incoming, type(self).__name__) for incoming in incomings]
        self.input_shapes = [shape for shape, _ in shapes_layers]
        self.input_layers = [layer for _, layer in shapes_layers]
        self.name = name
        self.params = OrderedDict()
        self.get_output_kwargs = []

    @property
    def output_shape(self):
        return _check_static_shape(self, self.get_output_shape_for(self.input_shapes))

    def get_output_shape_for(self, input_shapes):
        raise NotImplementedError

    def get_output_for(self, inputs, **kwargs):
        """The output expression for the list of input expressions ``inputs``."""
        raise NotImplementedError


def attach_update(shared, update):
    """A graph alias of ``shared`` that, when compiled, assigns ``update`` to it.

    The alias is a clone of ``shared`` that shares its storage; its
    ``default_update`` is ``update`` (an expression, or a callable
    ``update(alias) -> expression``), which ``pytensor.function`` applies after
    each call of any function whose graph contains the alias (Lasagne's
    mechanism for batch-norm statistics and random generator states). Functions
    compiled from other graphs (e.g. a deterministic validation output) are not
    affected. The update is also recorded in ``alias.tag.layer_update`` so that
    :func:`~theanompi.nn.get_state_updates` can list it.

    Example
    -------
    >>> import numpy as np, pytensor
    >>> count = pytensor.shared(np.float32(0))
    >>> alias = attach_update(count, lambda c: c + np.float32(1))
    >>> f = pytensor.function([], alias); _ = f(); _ = f()
    >>> float(count.get_value())
    2.0
    """
    alias = shared.clone()
    set_state_update(alias, update(alias) if callable(update) else update)
    return alias


def set_state_update(shared, update):
    """Make ``pytensor.function`` assign ``update`` to ``shared`` after each call (``default_update``).

    Use it on a shared variable that appears only in one graph (a fresh random
    generator); otherwise use :func:`attach_update`. Also records the update in
    ``shared.tag.layer_update``.

    Example
    -------
    >>> import numpy as np, pytensor
    >>> step = pytensor.shared(np.int64(0))
    >>> set_state_update(step, step + 1)
    >>> f = pytensor.function([], step); _ = f()
    >>> int(step.get_value())
    1
    """
    if (isinstance(shared.type, TensorType) and isinstance(update, pytensor.graph.basic.Variable)
            and update.type != shared.type and shared.type.is_super(update.type)):
        # pytensor.function wants a default update of exactly the shared variable's type: writing the update
        # into the whole of the variable forgets the static sizes (e.g. a channel count known from a reshape)
        # that the variable does not declare (and checks the sizes at run time).
        update = pytensor.tensor.set_subtensor(shared[(slice(None),) * shared.type.ndim], update)
    update = shared.type.filter_variable(update, allow_convert=True)
    if update.type != shared.type:
        raise ValueError(f"set_state_update: the update of {shared.name!r} has type {update.type}, expected "
                         f"{shared.type}")
    # pytensor 3 deprecates *setting* default_update but still honours it in pytensor.function.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        shared.default_update = update
    shared.tag.layer_update = update
    shared.tag.layer_update_order = next(_UPDATE_ORDER)
