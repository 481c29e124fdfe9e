"""``lasagne.layers.shape``: the names of :mod:`theanompi.models.layers.shape` (one implementation, re-exported)."""

from theanompi.models.layers.shape import *  # noqa: F403
from theanompi.models.layers.shape import __all__  # noqa: F401
