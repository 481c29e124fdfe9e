"""``lasagne.layers.conv``: the names of :mod:`theanompi.models.layers.conv` (one implementation, re-exported)."""

from theanompi.models.layers.conv import *  # noqa: F403
from theanompi.models.layers.conv import __all__  # noqa: F401
