"""``lasagne.layers.special``: :mod:`theanompi.models.layers.special` and, as in Lasagne, ``NonlinearityLayer``."""

from theanompi.models.layers.dense import NonlinearityLayer
from theanompi.models.layers.special import *  # noqa: F403
from theanompi.models.layers.special import __all__ as _ours

__all__ = [*_ours, "NonlinearityLayer"]
