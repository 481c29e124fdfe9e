"""``lasagne.init``: the initializers of :mod:`theanompi.models.layers.init` (one implementation, re-exported).

They draw from :func:`theanompi.lasagne.random.get_rng`.
"""

from theanompi.models.layers.init import *  # noqa: F403
from theanompi.models.layers.init import __all__  # noqa: F401
