"""Theano-MPI's Lasagne least-squares GAN at its path: ``MODELFILE=theanompi.models.lasagne_model_zoo.lsgan``,
``MODELCLASS=LSGAN``.

The zoo's LSGAN (:class:`theanompi.models.zoo.gans.LSGAN`: the least-squares losses of Mao et al. with
targets 0 and 1, no clipping) with the DCGAN networks (``arch=dcgan``) on MNIST from ``MODEL_DATA_DIR``
(cfg or environment), with Theano-MPI's settings: 100-dimensional noise, 64 images per worker and step,
RMSProp at 1e-4.

Example
-------
>>> LSGAN.defaults["loss"], LSGAN.defaults["arch"], LSGAN.defaults["data"]
('least_squares', 'dcgan', 'mnist')
"""

from __future__ import annotations

from theanompi.models.zoo import gans


class LSGAN(gans.LSGAN):
    """Least-squares GAN, DCGAN networks, on MNIST (see the module docstring)."""

    defaults = {"arch": "dcgan", "data": "mnist", "z_dim": 100, "lr": 1e-4, "n_epochs": 20}
