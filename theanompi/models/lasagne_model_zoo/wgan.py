"""Theano-MPI's Lasagne Wasserstein GAN at its path: ``MODELFILE=theanompi.models.lasagne_model_zoo.wgan``,
``MODELCLASS=WGAN``.

The zoo's WGAN (:mod:`theanompi.models.zoo.gans`) with the DCGAN networks of Theano-MPI's ``wgan.py``
(``arch=dcgan``: two strided 5x5 convolutions and a 1024-unit layer in the critic, their transposes with
batch norm in the generator) on MNIST from ``MODEL_DATA_DIR`` (``mnist.npz`` or ``mnist.pkl.gz``; cfg or
environment), with Theano-MPI's settings: 100-dimensional noise, 64 images per worker and step,
RMSProp at 5e-5, critic weights clipped to 0.01, 5 critic steps per generator step.

Example
-------
>>> WGAN.defaults["arch"], WGAN.defaults["data"], WGAN.defaults["clip"], WGAN.defaults["z_dim"]
('dcgan', 'mnist', 0.01, 100)
"""

from __future__ import annotations

from theanompi.models.zoo import gans


class WGAN(gans.WGAN):
    """Wasserstein GAN, DCGAN networks, on MNIST (see the module docstring)."""

    defaults = {"arch": "dcgan", "data": "mnist", "z_dim": 100, "lr": 5e-5, "clip": 0.01, "n_epochs": 20}
