"""``lasagne.objectives``: the losses and metrics of :mod:`theanompi.models.layers.objectives`, re-exported."""

from theanompi.models.layers.objectives import *  # noqa: F403
from theanompi.models.layers.objectives import __all__  # noqa: F401


