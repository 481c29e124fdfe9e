"""``lasagne.updates``: the optimizers of :mod:`theanompi.models.layers.updates`, re-exported."""

from theanompi.lasagne._unported import unported_names
from theanompi.models.layers.updates import *  # noqa: F403
from theanompi.models.layers.updates import __all__  # noqa: F401

__getattr__ = unported_names(__name__, ["adamax", "amsgrad", "norm_constraint"])
