"""``lasagne.updates``: the optimizers of :mod:`theanompi.models.layers.updates`, re-exported."""

from theanompi.models.layers.updates import *  # noqa: F403
from theanompi.models.layers.updates import __all__  # noqa: F401

