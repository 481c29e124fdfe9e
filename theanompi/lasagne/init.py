"""``lasagne.init``: the initializers of :mod:`theanompi.models.layers.init` (one implementation, re-exported).

They draw from :func:`theanompi.lasagne.random.get_rng`.
"""

from theanompi.lasagne._unported import unported_names
from theanompi.models.layers.init import *  # noqa: F403
from theanompi.models.layers.init import __all__  # noqa: F401

__getattr__ = unported_names(__name__, ["Glorot", "He", "Sparse"])
