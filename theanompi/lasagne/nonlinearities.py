"""``lasagne.nonlinearities``: :mod:`theanompi.models.layers.nonlinearities` re-exported (plus Lasagne's aliases)."""

from theanompi.models.layers.nonlinearities import *  # noqa: F403
from theanompi.models.layers.nonlinearities import ScaledTanH
from theanompi.models.layers.nonlinearities import __all__ as _ours

#: Lasagne's second spelling.
ScaledTanh = ScaledTanH
__all__ = [*_ours, "ScaledTanh"]
