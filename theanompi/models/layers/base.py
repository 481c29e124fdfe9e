"""Base classes of the layer library: :class:`Layer` and :class:`MergeLayer`.

A layer knows its input layer(s) (or only an input shape), its parameters
(pytensor shared variables registered with tags by :meth:`Layer.add_param`),
how to compute its output shape (:meth:`Layer.get_output_shape_for`) and its
output expression (:meth:`Layer.get_output_for`). Networks are evaluated by
:func:`theanompi.models.layers.get_output`, exactly as in Lasagne.

Example
-------
>>> import pytensor.tensor as pt
>>> from theanompi.models.layers import Layer, InputLayer, get_output
>>> class Double(Layer):
...     def get_output_for(self, input, **kwargs):
...         return 2 * input
>>> net = Double(InputLayer((None, 3)))
>>> net.output_shape
(None, 3)
"""

from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict

import numpy as np
import pytensor
import pytensor.tensor
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.tensor.type import TensorType

#: Creation order of state updates (``get_state_updates`` lists them in this order).
_UPDATE_ORDER = itertools.count()

__all__ = ["Layer", "MergeLayer", "attach_update", "create_param", "set_state_update"]


def _describe(spec) -> str:
    return f"{type(spec).__name__} {spec!r}"[:200]


def create_param(spec, shape, name=None):
    """A floatX shared variable of ``shape`` from ``spec``.

    Parameters
    ----------
    spec : SharedVariable, numpy.ndarray, callable or Initializer
        An existing shared variable (used as is; its number of dimensions must
        match), an array (copied into a new shared variable; its shape must
        match) or a callable ``spec(shape) -> array`` (an
        :mod:`~theanompi.models.layers.init` initializer).
    shape : tuple of int
        The parameter's shape; every entry must be a positive int.
    name : str, optional
        Name of the shared variable.

    Returns
    -------
    SharedVariable

    Raises
    ------
    ValueError
        For an unknown shape entry, a wrong shape or ndim, or an unusable ``spec``.

    Example
    -------
    >>> from theanompi.models.layers import init
    >>> create_param(init.Constant(1.0), (2, 3), "W").get_value().shape
    (2, 3)
    """
    shape = tuple(shape)
    if not all(isinstance(s, (int, np.integer)) and s > 0 for s in shape):
        raise ValueError(
            f"cannot create param {name!r} with shape {shape}: every dimension must be a known "
            "positive int (give the input layer a shape without None in the dimensions this layer needs)"
        )
    floatX = pytensor.config.floatX
    if isinstance(spec, SharedVariable):
        ndim = spec.type.ndim
        if ndim != len(shape):
            raise ValueError(
                f"shared variable {spec.name!r} given for param {name!r} has {ndim} dimensions, "
                f"expected {len(shape)} (shape {shape})"
            )
        actual = tuple(spec.get_value(borrow=True).shape)
        if actual != shape:
            raise ValueError(f"shared variable {spec.name!r} given for param {name!r} has shape {actual}, "
                             f"expected {shape}")
        return spec
    if isinstance(spec, pytensor.graph.basic.Variable):
        raise ValueError(f"param {name!r}: symbolic expressions are not supported as parameters, got {spec!r}; "
                         "pass a shared variable, an array or an initializer")
    if isinstance(spec, (np.ndarray, list, tuple, float, int, np.number)):
        value = np.asarray(spec)
        if value.shape != shape:
            raise ValueError(f"array given for param {name!r} has shape {value.shape}, expected {shape}")
    elif callable(spec):
        value = np.asarray(spec(shape))
        if value.shape != shape:
            raise ValueError(f"initializer {spec!r} for param {name!r} returned shape {value.shape}, "
                             f"expected {shape}")
    else:
        raise ValueError(f"cannot create param {name!r} from {_describe(spec)}: expected a shared variable, "
                         "an array or an initializer")
    return pytensor.shared(value.astype(floatX), name=name, shape=value.shape)


class Layer:
    """Base class of all layers with one input.

    Parameters
    ----------
    incoming : Layer or tuple
        The layer feeding this one, or the shape of its input (then
        :func:`get_output` needs the input expression for this layer).
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
    >>> from theanompi.models.layers import InputLayer, DenseLayer
    >>> DenseLayer(InputLayer((None, 4)), 3).output_shape
    (None, 3)
    """

    def __init__(self, incoming, name=None):
        if isinstance(incoming, tuple):
            self.input_shape = incoming
            self.input_layer = None
        elif isinstance(incoming, Layer):
            self.input_shape = incoming.output_shape
            self.input_layer = incoming
        else:
            raise ValueError(f"{type(self).__name__}: incoming must be a Layer or a shape tuple, "
                             f"got {_describe(incoming)}")
        self.name = name
        self.params = OrderedDict()
        self.get_output_kwargs = []
        if any(d is not None and d <= 0 for d in self.input_shape):
            raise ValueError(f"{type(self).__name__}: cannot create layer {name!r} with a non-positive "
                             f"input shape {self.input_shape}")

    @property
    def output_shape(self):
        """The shape of this layer's output (None for a dimension unknown at build time)."""
        return self.get_output_shape_for(self.input_shape)

    def get_params(self, unwrap_shared=True, **tags):
        """This layer's parameters, filtered by tags.

        ``tag=True`` keeps only parameters with that tag, ``tag=False`` only
        parameters without it (e.g. ``trainable=True, regularizable=False``).
        ``unwrap_shared`` is accepted for Lasagne compatibility (parameters are
        always shared variables here).
        """
        result = list(self.params.keys())
        only = {t for t, v in tags.items() if v}
        exclude = {t for t, v in tags.items() if not v}
        if only:
            result = [p for p in result if not (only - self.params[p])]
        if exclude:
            result = [p for p in result if not (self.params[p] & exclude)]
        return result

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
        return f"<{type(self).__name__}{label} output_shape={self.output_shape}>"


class MergeLayer(Layer):
    """Base class of layers with several inputs.

    Parameters
    ----------
    incomings : sequence of Layer or tuple
        The layers feeding this one, or their output shapes.
    name : str, optional

    Example
    -------
    >>> from theanompi.models.layers import InputLayer, ElemwiseSumLayer
    >>> a, b = InputLayer((None, 2)), InputLayer((None, 2))
    >>> ElemwiseSumLayer([a, b]).output_shape
    (None, 2)
    """

    def __init__(self, incomings, name=None):
        incomings = list(incomings)
        if not incomings:
            raise ValueError(f"{type(self).__name__}: needs at least one incoming layer, got {incomings!r}")
        self.input_shapes = []
        self.input_layers = []
        for incoming in incomings:
            if isinstance(incoming, tuple):
                self.input_shapes.append(incoming)
                self.input_layers.append(None)
            elif isinstance(incoming, Layer):
                self.input_shapes.append(incoming.output_shape)
                self.input_layers.append(incoming)
            else:
                raise ValueError(f"{type(self).__name__}: every incoming must be a Layer or a shape tuple, "
                                 f"got {_describe(incoming)}")
        self.name = name
        self.params = OrderedDict()
        self.get_output_kwargs = []

    @property
    def output_shape(self):
        return self.get_output_shape_for(self.input_shapes)

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
    :func:`~theanompi.models.layers.get_state_updates` can list it.

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
