"""Keras 3 on Keras's torch backend, trained by TorchClassifierModel.

On its torch backend a Keras model already is a ``torch.nn.Module`` whose variables are torch parameters (the
non-trainable ones -- batch-norm statistics, the dropout seed's state -- with ``requires_grad=False``).
:class:`KerasTraining` only passes torch's ``train()``/``eval()`` mode on as Keras's ``training`` flag (a Keras
model called without it runs in inference mode: no dropout, batch norm on its moving statistics);
:class:`KerasOnTorch` is :class:`~theanompi.models.keras_classifier.KerasClassifierModel`'s base on this backend:
``params`` in the order of the model's trainable variables, named by their Keras paths, and the non-trainable
variables checkpointed and (the floating-point ones) averaged over the workers. Theano-MPI's Wide ResNet
(:mod:`theanompi.models.keras_model_zoo.wresnet`) uses :class:`KerasTraining` too.

Example
-------
>>> import os; _ = os.environ.setdefault("KERAS_BACKEND", "torch")   # before keras is imported
>>> import keras
>>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.BatchNormalization()])
>>> module = KerasTraining(model)
>>> [(tuple(p.shape), p.requires_grad) for p in non_trainable(module)]   # batch norm's moving mean and variance
[((2,), False), ((2,), False)]
"""

from __future__ import annotations

import torch

from theanompi.models.torch_classifier import TorchClassifierModel


class KerasTraining(torch.nn.Module):
    """A Keras-on-torch model called with Keras's ``training`` flag following torch's ``train()``/``eval()``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, training=self.training)


def non_trainable(module: torch.nn.Module) -> list[torch.Tensor]:
    """The Keras model's non-trainable variables (torch parameters without gradients): batch-norm statistics, seed
    states."""
    return [p for p in module.parameters() if not p.requires_grad]


class KerasOnTorch(TorchClassifierModel):
    """TorchClassifierModel for a Keras model (wrapped by :attr:`adapt`), its variables named as Keras names them."""

    #: what turns the Keras model into the network this class trains
    adapt = KerasTraining

    def __init__(self, config):
        super().__init__(config)
        #: the non-trainable variables, in Keras's order (a checkpoint holds them; sync_state averages the
        #: floating-point ones)
        self.model_state = [v.value for v in self.network.model.non_trainable_variables]
        self.state_vars = [*self.state_vars, *self.model_state]

    def named_params(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(v.path, v.value) for v in self.network.model.trainable_variables]

    def running_stats(self) -> list[torch.Tensor]:
        return [p for p in self.model_state if p.is_floating_point()]
