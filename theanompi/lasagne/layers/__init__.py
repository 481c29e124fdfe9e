"""``lasagne.layers``: every layer and network function of :mod:`theanompi.models.layers`, under Lasagne's names.

One implementation: the names here are the objects of
:mod:`theanompi.models.layers` (``lasagne.layers.DenseLayer is
theanompi.models.layers.DenseLayer``). Lasagne's submodules (``base``,
``helper``, ``conv``, ...) re-export the matching modules; ``dnn`` raises
ImportError, so ``try: from lasagne.layers.dnn import ...`` falls back as
with a Lasagne without cuDNN.

Example
-------
>>> from theanompi.lasagne import layers
>>> import theanompi.models.layers as L
>>> layers.TransposedConv2DLayer is L.TransposedConv2DLayer, layers.helper.get_output is L.get_output
(True, True)
"""

import theanompi.models.layers as _ours
from theanompi.lasagne._unported import unported_names
from theanompi.lasagne.layers import (  # noqa: F401  (Lasagne's submodules)
    base,
    conv,
    dense,
    embedding,
    helper,
    input,
    local,
    merge,
    noise,
    normalization,
    pool,
    recurrent,
    shape,
    special,
)

#: Modules of theanompi.models.layers that Lasagne has at the top level (lasagne.init, ...), not in lasagne.layers.
_TOP_LEVEL_MODULES = {"init", "nonlinearities", "objectives", "regularization", "updates", "utils"}

__all__ = [name for name in _ours.__all__ if name not in _TOP_LEVEL_MODULES]
globals().update((name, getattr(_ours, name)) for name in __all__)

#: Every name of Lasagne's lasagne.layers is here; a misspelt one still gets an error that says lasagne.layers.
__getattr__ = unported_names(__name__, [])
