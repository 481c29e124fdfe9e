"""``lasagne.layers.base``: the names of :mod:`theanompi.models.layers.base` (one implementation, re-exported)."""

from theanompi.models.layers.base import *  # noqa: F403
from theanompi.models.layers.base import __all__  # noqa: F401
