"""``lasagne.layers.dense``: the names of :mod:`theanompi.models.layers.dense` (one implementation, re-exported)."""

from theanompi.models.layers.dense import *  # noqa: F403
from theanompi.models.layers.dense import __all__  # noqa: F401
