"""``lasagne.layers.special``: the names of :mod:`theanompi.models.layers.special` (one implementation, re-exported)."""

from theanompi.models.layers.special import *  # noqa: F403
from theanompi.models.layers.special import __all__  # noqa: F401
