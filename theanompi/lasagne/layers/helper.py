"""``lasagne.layers.helper``: the names of :mod:`theanompi.models.layers.helper` (one implementation, re-exported)."""

from theanompi.models.layers.helper import *  # noqa: F403
from theanompi.models.layers.helper import __all__  # noqa: F401
