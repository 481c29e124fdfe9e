"""The one random generator of :mod:`theanompi.nn` (Lasagne's ``lasagne.random``).

Initializers (:mod:`theanompi.nn.init`) sample from it and random layers (dropout, noise) take their seeds from
it when they are built: call :func:`set_rng` with the same seed on every rank and every rank builds the same
network and draws the same masks.

Example
-------
>>> import numpy as np
>>> from theanompi.nn import random
>>> random.set_rng(np.random.RandomState(1234))
>>> isinstance(random.get_rng(), np.random.RandomState)
True
>>> random.set_rng(7)                                  # an int seed: RandomState(7)
>>> random.random_int(10) == np.random.RandomState(7).randint(10)
True
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["get_rng", "random_int", "set_rng"]

#: Lasagne's default is numpy's global generator; a seeded RandomState of our own keeps every rank identical.
_rng: Any = np.random.RandomState(1234)


def set_rng(rng) -> None:
    """Use ``rng`` for all initializers and noise seeds.

    ``rng``: a ``numpy.random.RandomState`` (Lasagne's kind), the module
    ``numpy.random`` itself, a ``numpy.random.Generator`` or an int seed (a new
    ``RandomState(seed)``).

    Example
    -------
    >>> set_rng(np.random.RandomState(42))
    >>> get_rng().seed(42)
    """
    global _rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        rng = np.random.RandomState(int(rng))
    if not (isinstance(rng, (np.random.Generator, np.random.RandomState)) or rng is np.random):
        raise ValueError(f"set_rng: expected a numpy RandomState, Generator, numpy.random or an int seed, got {rng!r}")
    _rng = rng


def get_rng():
    """The generator the initializers draw from (a ``RandomState`` unless :func:`set_rng` was given another kind).

    Example
    -------
    >>> isinstance(get_rng(), (np.random.Generator, np.random.RandomState))
    True
    """
    return _rng


def random_int(high: int) -> int:
    """One int in ``[0, high)`` from :func:`get_rng`, whatever its kind (``randint`` or ``integers``).

    Example
    -------
    >>> 0 <= random_int(10) < 10
    True
    """
    rng = get_rng()
    draw = rng.integers if isinstance(rng, np.random.Generator) else rng.randint
    return int(draw(high))
