"""``lasagne.layers.local``: the names of :mod:`theanompi.models.layers.local` (one implementation, re-exported)."""

from theanompi.models.layers.local import *  # noqa: F403
from theanompi.models.layers.local import __all__  # noqa: F401
