"""``lasagne.objectives``: the losses and metrics of :mod:`theanompi.models.layers.objectives`, re-exported."""

from theanompi.lasagne._unported import unported_names
from theanompi.models.layers.objectives import *  # noqa: F403
from theanompi.models.layers.objectives import __all__  # noqa: F401

__getattr__ = unported_names(__name__, ["binary_hinge_loss", "multiclass_hinge_loss"])
