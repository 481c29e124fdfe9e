"""``lasagne.layers.merge``: the names of :mod:`theanompi.models.layers.merge` (one implementation, re-exported)."""

from theanompi.models.layers.merge import *  # noqa: F403
from theanompi.models.layers.merge import __all__  # noqa: F401
