"""Theano-MPI's layer module (``theanompi.models.layers2``) on pytensor and our Ops.

Model files written for Theano-MPI run after replacing ``theano`` by ``pytensor``::

    from theanompi.models.layers2 import (Conv, Pool, Dropout, FC, Subtract, Crop, Dimshuffle, Softmax,
                                          Flatten, LRN, Constant, Normal, get_params, get_layers)

Each layer is built from an input layer (or a symbolic input plus ``input_shape``), exposes ``.output``
(a pytensor expression), ``.output_shape`` (a tuple of ints, computed in Python), and, when it has
weights, ``.params`` (floatX shared variables) and ``.weight_type`` (``'W'``/``'b'``).
:func:`get_layers` walks ``.input_layer`` back from the last layer; :func:`get_params` collects
``(params, weight_types)``.

Module-level state, as in Theano-MPI:

* ``rng`` -- the ``numpy.random.RandomState(23455)`` every weight initialiser draws from, so every rank
  builds identical weights; a model may replace it (``layers2.rng = np.random.RandomState(...)``) before
  it builds its layers.
* importing this module sets ``pytensor.config.on_unused_input = 'warn'``, because Theano-MPI's model
  files compile functions whose inputs (``subb_ind``, ``lr``) are not always used.

What differs from Theano-MPI: convolutions run on :func:`theanompi.backend.ops.conv2d` (CPU, BLAS) instead
of cuDNN, pooling on :mod:`theanompi.backend.ops` pooling, random crops and dropout masks on pytensor
shared generators seeded per rank (see :mod:`.base`); ``BatchNormal`` (a stub in Theano-MPI) raises.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi.models import layers2
>>> x = pt.matrix("x")
>>> fc = layers2.FC(x, 4, layers2.Normal((3, 4)), layers2.Constant((4,)), input_shape=(2, 3), printinfo=False)
>>> sm = layers2.Softmax(fc, 2, printinfo=False)
>>> [type(l).__name__ for l in layers2.get_layers(sm)]
['FC', 'Softmax']
>>> layers2.get_params(layers2.get_layers(sm))[1]
['W', 'b', 'W', 'b']
>>> pytensor.config.on_unused_input
'warn'
"""

import numpy as np
import pytensor

from theanompi.models.layers2.base import Layer
from theanompi.models.layers2.basic import Crop, Dimshuffle, Dropout, Flatten, Subtract
from theanompi.models.layers2.conv import Conv, ConvPoolLRN, ConvPoolLRN_bc01, Pool
from theanompi.models.layers2.dense import FC, Softmax
from theanompi.models.layers2.network import count_params, extract_weight_types, get_layers, get_params
from theanompi.models.layers2.normalization import LRN, BatchNormal, CrossChannelNormalization
from theanompi.models.layers2.weights import (
    Constant,
    GlorotNormal,
    GlorotUniform,
    HeNormal,
    HeUniform,
    Normal,
    Uniform,
    Weight,
)

pytensor.config.on_unused_input = "warn"

#: The generator weight initialisers draw from (replaceable by models, as in Theano-MPI).
rng = np.random.RandomState(23455)
#: Drawn first from ``rng``, as Theano-MPI did, so that the weights that follow equal Theano-MPI's;
#: it is also the base seed of random layers outside a session (see :mod:`.base`).
seed_this = int(rng.randint(0, 2**31 - 1))

__all__ = [
    "BatchNormal", "Constant", "Conv", "ConvPoolLRN", "ConvPoolLRN_bc01", "Crop", "CrossChannelNormalization",
    "Dimshuffle", "Dropout", "FC", "Flatten", "GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "LRN",
    "Layer", "Normal", "Pool", "Softmax", "Subtract", "Uniform", "Weight", "count_params", "extract_weight_types",
    "get_layers", "get_params", "rng", "seed_this",
]
