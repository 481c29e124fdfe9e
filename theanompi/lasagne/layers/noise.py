"""``lasagne.layers.noise``: the names of :mod:`theanompi.models.layers.noise` (one implementation, re-exported)."""

from theanompi.models.layers.noise import *  # noqa: F403
from theanompi.models.layers.noise import __all__  # noqa: F401
