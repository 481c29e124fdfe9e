"""``lasagne.layers.special``: :mod:`theanompi.models.layers.special`, the transformers, ``NonlinearityLayer``.

As in Lasagne, where these layers share one module.
"""

from theanompi.models.layers.dense import NonlinearityLayer
from theanompi.models.layers.special import *  # noqa: F403
from theanompi.models.layers.special import __all__ as _ours
from theanompi.models.layers.transformer import TPSTransformerLayer, TransformerLayer

__all__ = [*_ours, "NonlinearityLayer", "TPSTransformerLayer", "TransformerLayer"]
