"""``lasagne.layers.dnn`` (cuDNN layers) is not provided: importing it raises ImportError.

Lasagne code tries it first and falls back on the generic layers
(``try: from lasagne.layers.dnn import batch_norm_dnn except ImportError:
from lasagne.layers import batch_norm``); the fallback is what runs here,
on :mod:`theanompi.backend.ops`' own convolution and pooling.
"""

raise ImportError("lasagne.layers.dnn (cuDNN layers) is not part of theanompi.lasagne; use the generic layers "
                  "(lasagne.layers.Conv2DLayer, Pool2DLayer, batch_norm), which run on theanompi's own ops")
