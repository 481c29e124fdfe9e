"""theanompi's DataClasses; Theano-MPI's names (``Cifar10_data``, ``ImageNet_data``, ``MNIST_data``) load on first use.

Importing the package stays cheap (numpy only); the loaders' modules are imported
when one of the names is first looked up.

Example
-------
>>> import theanompi.models.data as data
>>> data.Cifar10_data.__module__, data.ImageNet_data.n_class
('theanompi.models.data.cifar10', 1000)
"""

from __future__ import annotations

import importlib

#: Theano-MPI's class names -> the module that defines them.
THEANO_MPI_NAMES = {
    "Cifar10_data": "theanompi.models.data.cifar10",
    "ImageNet_data": "theanompi.models.data.imagenet",
    "MNIST_data": "theanompi.models.data.mnist",
}

__all__ = list(THEANO_MPI_NAMES)


def __getattr__(name: str):
    if name in THEANO_MPI_NAMES:
        value = getattr(importlib.import_module(THEANO_MPI_NAMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(THEANO_MPI_NAMES))
