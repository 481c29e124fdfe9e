"""``lasagne.random``: the one generator that initializers and dropout/noise seeds draw from.

:func:`set_rng` takes a ``numpy.random.RandomState`` (as Lasagne code passes),
a ``numpy.random.Generator`` or an int seed. It is
:func:`theanompi.models.layers.init.set_rng` itself.

Example
-------
>>> import numpy as np
>>> from theanompi.lasagne import random
>>> random.set_rng(np.random.RandomState(1234))
>>> isinstance(random.get_rng(), np.random.RandomState)
True
>>> random.set_rng(np.random.default_rng(0))
"""

from theanompi.models.layers.init import get_rng, set_rng

__all__ = ["get_rng", "set_rng"]
