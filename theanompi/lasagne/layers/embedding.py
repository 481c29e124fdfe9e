"""``lasagne.layers.embedding``: the names of :mod:`theanompi.models.layers.embedding`, re-exported."""

from theanompi.models.layers.embedding import *  # noqa: F403
from theanompi.models.layers.embedding import __all__  # noqa: F401
