"""The :class:`Layer` base of :mod:`theanompi.models.layers2` and the per-rank random generators.

A layer takes either another layer (anything with ``.output`` and ``.output_shape``; it becomes
``.input_layer``) or a symbolic tensor together with ``input_shape``. Layers compute ``.output_shape``
in Python; a user's own subclass that only builds ``.output`` can call :meth:`Layer.get_output_shape`,
which evaluates the shape of the graph on zeros (as Theano-MPI did for every layer).

Random layers (:class:`~theanompi.models.layers2.Crop`, :class:`~theanompi.models.layers2.Dropout`) draw
from :func:`layer_rng`: a pytensor shared generator seeded from the session (``seed`` and ``rank`` of
:func:`theanompi.models.current_config.current`) and the layer's creation index, advanced after every call of a
compiled function.

Example
-------
>>> import pytensor.tensor as pt
>>> class Twice(Layer):
...     def __init__(self, input, input_shape=None):
...         self.get_input_shape(input, input_shape)
...         self.output = 2 * self.input
...         self.output_shape = self.get_output_shape(self.input_shape)
>>> Twice(pt.matrix("x"), input_shape=(4, 3)).output_shape
(4, 3)
"""

from __future__ import annotations

import itertools
import sys
import warnings
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace

from theanompi.models import current_config
from theanompi.nn.layers import set_state_update

__all__ = ["Layer", "layer_rng", "draw_uniform"]

_RANDOM_LAYER_INDEX = itertools.count()


def _shape_tuple(shape, who: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ValueError(f"{who}: input_shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 1 for d in dims):
        raise ValueError(f"{who}: input_shape must hold positive sizes, got {shape!r}")
    return dims


class Layer:
    """Base class: input handling, output-shape evaluation and the ``printinfo`` line.

    Attributes set by :meth:`get_input_shape`: ``input`` (symbolic), ``input_shape`` (tuple of ints) and,
    when built on a layer, ``input_layer``.
    """

    name = "Layer"
    #: the layer's symbolic output, built by the subclass
    output: Any

    def __init__(self):
        self.W = None
        self.b = None

    def get_input_shape(self, input, input_shape) -> None:
        """Take the input from a layer (``input.output``) or from a tensor plus ``input_shape``."""
        who = type(self).__name__
        if hasattr(input, "output"):
            self.input_layer = input
            self.input = input.output
            self.input_shape = _shape_tuple(input.output_shape, who)
        elif input_shape is not None and len(input_shape) > 0:
            self.input = pt.as_tensor_variable(input)
            self.input_shape = _shape_tuple(input_shape, who)
        else:
            raise ValueError(f"{who}: input must be a layer (with .output) or a tensor given with input_shape; "
                             f"got input={type(input).__name__} and input_shape={input_shape!r}")
        if self.input.ndim != len(self.input_shape):
            raise ValueError(f"{who}: input has {self.input.ndim} dimensions but input_shape "
                             f"{self.input_shape} has {len(self.input_shape)}")

    def get_output_shape(self, input_shape) -> tuple[int, ...]:
        """The shape ``.output`` takes for an input of ``input_shape``, by evaluating the graph on zeros."""
        probe = self.input.type.clone(shape=(None,) * self.input.ndim)("probe")
        shape = graph_replace(self.output.shape, {self.input: probe}, strict=False)
        with warnings.catch_warnings():
            # Random layers' default updates still refer to the original input: leave them out (pytensor 3
            # deprecates the flag but honours it).
            warnings.simplefilter("ignore", DeprecationWarning)
            fn = pytensor.function([probe], shape, on_unused_input="ignore", no_default_updates=True)
        return tuple(int(d) for d in fn(np.zeros(input_shape, dtype=self.input.dtype)))

    def set_output_shape(self, computed, given) -> None:
        """Store ``computed``; a ``given`` output_shape (Theano-MPI's keyword) must agree with it."""
        computed = tuple(int(d) for d in computed)
        if given is not None and tuple(given) != computed:
            raise ValueError(f"{type(self).__name__}: output_shape={tuple(given)} was given, but input shape "
                             f"{self.input_shape} gives {computed}")
        self.output_shape = computed

    def print_shape(self) -> None:
        """Print the layer's name with its input and output shapes (Theano-MPI's ``printinfo``)."""
        print(f"Layer {self.name:<20} in {tuple(self.input_shape)} --> out {tuple(self.output_shape)}")


def layer_rng(name: str):
    """A new shared random generator for one layer, seeded by session seed, rank and creation index.

    Outside a session (no :func:`theanompi.models.current_config.current`) the seed is ``layers2.seed_this``
    and the rank 0. The generator is advanced by every compiled function that uses it.

    Example
    -------
    >>> r = layer_rng("demo")
    >>> type(r).__name__
    'RandomGeneratorSharedVariable'
    """
    config = current_config.current()
    if config is not None:
        seed, rank = int(config.seed) % 2**32, int(config.rank)
    else:
        seed, rank = sys.modules[__package__].seed_this, 0
    generator = np.random.default_rng([seed, rank, next(_RANDOM_LAYER_INDEX)])
    return pt.random.shared_rng(generator, name=name)


def draw_uniform(rng, size):
    """Uniform [0, 1) floatX draws of ``size`` from ``rng``; the compiled function advances ``rng``.

    Example
    -------
    >>> u = draw_uniform(layer_rng("demo"), (3,))
    >>> f = pytensor.function([], u); bool((f() != f()).any())
    True
    """
    next_rng, values = rng.uniform(size=size)
    set_state_update(rng, next_rng)
    return values.astype(pytensor.config.floatX)
