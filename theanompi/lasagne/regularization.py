"""``lasagne.regularization``: :mod:`theanompi.models.layers.regularization` re-exported."""

from theanompi.models.layers.regularization import *  # noqa: F401,F403
from theanompi.models.layers.regularization import __all__  # noqa: F401
