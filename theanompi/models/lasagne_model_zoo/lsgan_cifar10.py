"""Theano-MPI's least-squares GAN on CIFAR-10 at its path:
``MODELFILE=theanompi.models.lasagne_model_zoo.lsgan_cifar10``, ``MODELCLASS=LSGAN``.

:class:`theanompi.models.lasagne_model_zoo.lsgan.LSGAN` on the CIFAR-10 python batches in
``MODEL_DATA_DIR`` (cfg or environment), with wider networks (``widths`` 128, 256).

Example
-------
>>> LSGAN.defaults["data"], LSGAN.defaults["widths"]
('cifar10', '128,256')
"""

from __future__ import annotations

from theanompi.models.lasagne_model_zoo import lsgan


class LSGAN(lsgan.LSGAN):
    """Least-squares GAN, DCGAN networks, on CIFAR-10 (see the module docstring)."""

    defaults = {"data": "cifar10", "widths": "128,256"}
