"""Keras 3 on Keras's jax backend, trained by JaxFunctionalClassifier.

:class:`KerasNetwork` is a Keras-on-jax model as a :class:`~theanompi.models.jax_functional.FunctionalNetwork`:
its trainable and non-trainable variables' values (named by their Keras paths) and its ``stateless_call``, the
pure function every compiled step calls; :class:`KerasOnJax` is
:class:`~theanompi.models.keras_classifier.KerasClassifierModel`'s base on this backend.

Example (in a process whose Keras runs on jax, ``KERAS_BACKEND=jax``: not this module's doctest run, whose Keras
may run on torch; tests/models/test_keras_classifier.py runs these classes on both backends)
-------
>>> import keras, jax.numpy as jnp                                                    # doctest: +SKIP
>>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
...                           keras.layers.BatchNormalization()])                    # doctest: +SKIP
>>> network = KerasNetwork(model)                                                     # doctest: +SKIP
>>> logits, state = network.apply([v for _, v in network.params], [v for _, v in network.state],
...                               jnp.ones((4, 3)), training=True)                  # doctest: +SKIP
>>> [name for name, _ in network.state], logits.shape                                 # doctest: +SKIP
(['sequential/batch_normalization/moving_mean', 'sequential/batch_normalization/moving_variance'], (4, 2))
"""

from __future__ import annotations

from typing import Any

from theanompi.models.jax_functional import FunctionalNetwork, JaxFunctionalClassifier


class KerasNetwork(FunctionalNetwork):
    """A Keras-on-jax model as a FunctionalNetwork (see the module docstring)."""

    def __init__(self, model) -> None:
        super().__init__(model, [(v.path, v.value) for v in model.trainable_variables],
                         [(v.path, v.value) for v in model.non_trainable_variables])

    def apply(self, params: list, state: list, x, training: bool) -> tuple[Any, list]:
        logits, new_state = self.model.stateless_call(params, state, x, training=training)
        return logits, list(new_state)

    def write_back(self, params: list, state: list) -> None:
        for variable, value in zip(self.model.trainable_variables + self.model.non_trainable_variables,
                                   [*params, *state]):
            variable.assign(value)


class KerasOnJax(JaxFunctionalClassifier):
    """JaxFunctionalClassifier for a Keras model (made a FunctionalNetwork by :attr:`adapt`)."""

    #: what turns the Keras model into the network this class trains
    adapt = KerasNetwork

