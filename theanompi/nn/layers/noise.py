"""Stochastic layers: :class:`DropoutLayer` (:func:`dropout_channels`, ...), :class:`GaussianNoiseLayer`.

Each training-mode output (``deterministic=False``) draws from its own pytensor
random generator, a shared variable whose state ``pytensor.function`` advances
after every call (``default_update``), so every call of a compiled training
function draws a new mask. The generators are seeded from
:func:`theanompi.nn.random.get_rng` when the layer is built: with the
same :func:`~theanompi.nn.random.set_rng` seed, runs are reproducible.
``deterministic=True`` (validation, inference) makes these layers the identity.

Example
-------
>>> from theanompi.nn import InputLayer, DropoutLayer, get_output
>>> l = DropoutLayer(InputLayer((None, 100)), p=0.5)
>>> get_output(l, deterministic=True) is l.input_layer.input_var
True
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

from theanompi.nn.layers.base import Layer, set_state_update
from theanompi.nn.random import random_int

__all__ = [
    "DropoutLayer", "GaussianNoiseLayer", "RandomDrawLayer", "dropout", "dropout_channels", "dropout_locations",
    "spatial_dropout",
]


class RandomDrawLayer(Layer):
    """Base of layers that draw random numbers while training, seeded from :mod:`theanompi.nn.random` when built.

    Every draw comes from a fresh shared generator whose state
    ``pytensor.function`` advances after each call (a new draw per call).

    Example
    -------
    >>> layer = RandomDrawLayer((None, 2))
    >>> layer.draw_uniform((2, 3), 0.0, 1.0, "float32").eval().shape
    (2, 3)
    """

    def __init__(self, incoming, **kwargs):
        super().__init__(incoming, **kwargs)
        self._seed = random_int(2**31 - 1)
        self._draws = 0

    def _new_rng(self):
        """A fresh shared generator whose state advances after every call of a compiled function."""
        self._draws += 1
        return pt.random.shared_rng(np.random.default_rng([self._seed, self._draws]), name=f"{self.name or 'rng'}")

    def draw_uniform(self, shape, low, high, dtype):
        """Uniform draws in ``[low, high)`` of ``shape`` (ints or scalar expressions), as ``dtype``."""
        rng = self._new_rng()
        next_rng, values = rng.uniform(low, high, size=shape)
        set_state_update(rng, next_rng)
        return values.astype(dtype)

    def draw_normal(self, shape, dtype):
        """Standard normal draws of ``shape``, as ``dtype``."""
        rng = self._new_rng()
        next_rng, values = rng.normal(0.0, 1.0, size=shape)
        set_state_update(rng, next_rng)
        return values.astype(dtype)


class DropoutLayer(RandomDrawLayer):
    """Sets input entries to zero with probability ``p`` (training only).

    Parameters
    ----------
    incoming : Layer or tuple
    p : float
        Probability of dropping an entry, in [0, 1).
    rescale : bool
        Divide the kept entries by ``1 - p`` (inverted dropout), so the
        expected output equals the input and inference needs no scaling.
    shared_axes : tuple of int
        Axes along which one mask value is shared (e.g. (2, 3): drop whole
        feature maps).

    Example
    -------
    >>> DropoutLayer((None, 8, 4, 4), p=0.2, shared_axes=(2, 3)).output_shape
    (None, 8, 4, 4)
    """

    def __init__(self, incoming, p=0.5, rescale=True, shared_axes=(), **kwargs):
        super().__init__(incoming, **kwargs)
        if not 0 <= p < 1:
            raise ValueError(f"DropoutLayer: p must be in [0, 1), got {p!r}")
        self.p = float(p)
        self.rescale = bool(rescale)
        ndim = len(self.input_shape)
        try:
            axes = tuple(int(a) % ndim for a in shared_axes if -ndim <= int(a) < ndim)
        except TypeError:
            raise ValueError(f"DropoutLayer: shared_axes must be a tuple of ints, got {shared_axes!r}") from None
        if len(axes) != len(tuple(shared_axes)):
            raise ValueError(f"DropoutLayer: shared_axes {shared_axes!r} out of range for input shape "
                             f"{self.input_shape}")
        self.shared_axes = axes

    def get_output_for(self, input, deterministic=False, **kwargs):
        if deterministic or self.p == 0:
            return input
        dtype = input.dtype
        retain = np.asarray(1.0 - self.p, dtype=dtype)
        shape = tuple(1 if a in self.shared_axes else input.shape[a] for a in range(input.ndim))
        mask = pt.lt(self.draw_uniform(shape, 0.0, 1.0, dtype), retain).astype(dtype)
        if self.shared_axes:
            mask = pt.specify_broadcastable(mask, *self.shared_axes)
        out = input * mask
        if self.rescale:
            out = out * np.asarray(1.0 / (1.0 - self.p), dtype=dtype)
        return out


dropout = DropoutLayer


def dropout_channels(incoming, *args, **kwargs):
    """A :class:`DropoutLayer` that drops whole channels: one mask value per (example, channel).

    Arguments as for :class:`DropoutLayer`, except ``shared_axes``.

    Example
    -------
    >>> dropout_channels((None, 8, 4, 4), p=0.2).shared_axes
    (2, 3)
    """
    ndim = len(getattr(incoming, "output_shape", incoming))
    return DropoutLayer(incoming, *args, **{**kwargs, "shared_axes": tuple(range(2, ndim))})


spatial_dropout = dropout_channels


def dropout_locations(incoming, *args, **kwargs):
    """A :class:`DropoutLayer` that drops whole locations: one mask value per position, shared over the channels.

    Arguments as for :class:`DropoutLayer`, except ``shared_axes``.

    Example
    -------
    >>> dropout_locations((None, 8, 4, 4)).shared_axes
    (1,)
    """
    return DropoutLayer(incoming, *args, **{**kwargs, "shared_axes": (1,)})


class GaussianNoiseLayer(RandomDrawLayer):
    """Adds zero-mean Gaussian noise of standard deviation ``sigma`` (training only).

    Example
    -------
    >>> GaussianNoiseLayer((None, 3), sigma=0.1).sigma
    0.1
    """

    def __init__(self, incoming, sigma=0.1, **kwargs):
        super().__init__(incoming, **kwargs)
        if not sigma >= 0:
            raise ValueError(f"GaussianNoiseLayer: sigma must be >= 0, got {sigma!r}")
        self.sigma = float(sigma)

    def get_output_for(self, input, deterministic=False, **kwargs):
        if deterministic or self.sigma == 0:
            return input
        noise = self.draw_normal(input.shape, input.dtype)
        return input + noise * np.asarray(self.sigma, dtype=input.dtype)
