"""``lasagne.layers.input``: the names of :mod:`theanompi.models.layers.input` (one implementation, re-exported)."""

from theanompi.models.layers.input import *  # noqa: F403
from theanompi.models.layers.input import __all__  # noqa: F401
