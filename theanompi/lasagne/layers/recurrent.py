"""``lasagne.layers.recurrent``: the names of :mod:`theanompi.models.layers.recurrent`, re-exported."""

from theanompi.models.layers.recurrent import *  # noqa: F403
from theanompi.models.layers.recurrent import __all__  # noqa: F401
