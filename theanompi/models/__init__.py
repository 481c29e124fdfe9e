"""Models: the ModelClass contract, the base classes, the layer libraries, the data, the zoo.

Theano-MPI shipped its models inside its ``theanompi`` package, and they keep their paths here
(``MODELFILE=theanompi.models.cifar10``, ``theanompi.models.alex_net``, ``theanompi.models.googlenet``,
``theanompi.models.lasagne_model_zoo.{vgg16,resnet50,wgan,lsgan}``,
``theanompi.models.keras_model_zoo.wresnet``); as in Theano-MPI this package exports ``AlexNet``,
``Cifar10_model`` and ``GoogLeNet`` (``MODELFILE=theanompi.models``, ``MODELCLASS=Cifar10_model``).
They are imported when first asked for, so ``import theanompi.models`` stays light (no pytensor).

Example
-------
>>> import theanompi.models
>>> sorted(theanompi.models.__all__)
['AlexNet', 'Cifar10_model', 'GoogLeNet']
>>> theanompi.models.Cifar10_model.__module__          # doctest: +SKIP
'theanompi.models.cifar10'
"""

from __future__ import annotations

import importlib
from typing import Any

#: the names Theano-MPI's ``theanompi.models`` exported -> the module that defines each
EXPORTS = {
    "AlexNet": "theanompi.models.alex_net",
    "Cifar10_model": "theanompi.models.cifar10",
    "GoogLeNet": "theanompi.models.googlenet",
}

__all__ = list(EXPORTS)


def __getattr__(name: str) -> Any:
    if name in EXPORTS:
        return getattr(importlib.import_module(EXPORTS[name]), name)
    raise AttributeError(f"module 'theanompi.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
