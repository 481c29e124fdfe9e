"""``lasagne.layers.normalization``: the names of :mod:`theanompi.models.layers.normalization`, re-exported."""

from theanompi.models.layers.normalization import *  # noqa: F403
from theanompi.models.layers.normalization import __all__  # noqa: F401
