"""``lasagne.layers.pool``: the names of :mod:`theanompi.models.layers.pool` (one implementation, re-exported)."""

from theanompi.models.layers.pool import *  # noqa: F403
from theanompi.models.layers.pool import __all__  # noqa: F401
