"""``lasagne.theano_extensions.padding``: ``pad`` is :func:`theanompi.nn.layers.shape.pad_tensor`.

Example
-------
>>> import numpy as np
>>> pad(np.ones((1, 2), "float32"), 1, val=0).eval().tolist()
[[0.0, 1.0, 1.0, 0.0]]
"""

from theanompi.nn.layers.shape import pad_tensor as pad

__all__ = ["pad"]
