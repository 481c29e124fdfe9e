"""``lasagne.layers.pool``: the names of :mod:`theanompi.models.layers.pool` (one implementation, re-exported).

Not ported: Lasagne's module-level helpers outside its ``__all__``, ``pool_3d`` (Theano's, imported there) and
``pool_2d_nxn_regions`` (use :class:`SpatialPyramidPoolingLayer` with ``implementation='kaiming'``).
"""

from theanompi.lasagne._unported import unported_names
from theanompi.models.layers.pool import *  # noqa: F403
from theanompi.models.layers.pool import __all__  # noqa: F401

__getattr__ = unported_names(__name__, ["pool_2d_nxn_regions", "pool_3d"])
