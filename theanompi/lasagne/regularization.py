"""``lasagne.regularization``: :mod:`theanompi.models.layers.regularization` re-exported."""

from theanompi.models.layers.regularization import *  # noqa: F403
from theanompi.models.layers.regularization import __all__  # noqa: F401
