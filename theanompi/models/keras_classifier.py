"""KerasClassifierModel: the ModelClass contract for a Keras 3 ``keras.Model`` classifier, on Keras's torch or jax
backend.

A subclass supplies the data (:meth:`build_data`, usually ``self.shard(x_train, y_train, x_val, y_val)``) and the
network (:meth:`build_network`, a ``keras.Model`` mapping a batch to logits, built with Keras's layers; every rank
seeds Keras with ``config.seed`` first, so every rank builds the same initial weights). It trains with theanompi's
own momentum SGD (v <- mu*v - lr*g; p <- p + v, ClassifierModel's arithmetic, weight decay on weights of two or
more dimensions), not a Keras optimizer, so that every rule treats it as any other model. Keras picks its backend
once per process, from ``KERAS_BACKEND`` (``torch`` when unset: theanompi sets it before importing Keras, which
would otherwise default to tensorflow), and so does this class's base:

* ``torch``: :class:`theanompi.models.keras_torch.KerasOnTorch`, a
  :class:`~theanompi.models.torch_classifier.TorchClassifierModel`. The Keras model is a ``torch.nn.Module``
  (wrapped to pass the training flag); ``params`` are its trainable variables' torch parameters, and BSP ``cdd``
  exchanges the flat gradient ``backward()`` writes, bucket by bucket while backward runs.
* ``jax``: :class:`theanompi.models.keras_jax.KerasOnJax`, a
  :class:`~theanompi.models.jax_functional.JaxFunctionalClassifier`. The Keras model's ``stateless_call`` is the
  pure function every ``jax.jit``-compiled step calls; ``params`` are
  :class:`~theanompi.comm.array_cell.ArrayCell` s holding its trainable variables' values.

``params`` are named by the variables' Keras paths (``sequential/dense/kernel``) and ordered as the model's
``trainable_variables`` on both backends.

Either way ``state_vars`` hold the learning rate, the momenta and the model's non-trainable variables
(``model_state``: batch-norm statistics, the dropout seed's state), so ``RESUME`` continues where a run stopped;
the floating-point ones (batch-norm statistics) are averaged over the workers at each epoch end. Another backend
is refused in one line; ``from theanompi.models.keras_classifier import keras`` gives the ``keras`` module on the
chosen backend (a model file importing ``keras`` before this module makes Keras pick its own default).

MODEL_* options: ``batch_size``, ``lr``, ``momentum``, ``weight_decay``, ``n_epochs`` (ClassifierModel's). Without
Keras (or its backend's framework) installed, a ModelClass built on this module fails at launch with one line naming
the extra to install (``theanompi.models.loader``).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.data.digits import load_digits_split
>>> from theanompi.session.recorder import Recorder
>>> class Softmax(KerasClassifierModel):
...     def build_data(self):
...         (xt, yt), (xv, yv) = load_digits_split()
...         return self.shard(xt, yt, xv, yv)
...     def build_network(self):
...         return keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
>>> model = Softmax(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"lr": 0.1}))
>>> len(model.params), len(model.state_vars)           # kernel, bias; lr and their momenta
(2, 3)
>>> model.compile_iter_fns("cdd")
>>> vector = model.train_iter(0, Recorder(None))
>>> vector.shape, vector.dtype
((650,), dtype('float32'))
>>> model.apply_update(vector)        # one worker: the sum is its own gradient
"""

from __future__ import annotations

import os

from theanompi.core.errors import ConfigError, ContractError

os.environ.setdefault("KERAS_BACKEND", "torch")  # before Keras is imported: its own default is tensorflow
import keras  # (Keras reads KERAS_BACKEND when it is first imported)

#: the Keras backends this class trains on
BACKENDS = ("torch", "jax")
BACKEND = keras.backend.backend()
if BACKEND not in BACKENDS:
    raise ConfigError(f"KerasClassifierModel trains Keras on its torch or jax backend, but this process runs "
                      f"{BACKEND!r} (KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r}): set KERAS_BACKEND=torch or "
                      "KERAS_BACKEND=jax")

if BACKEND == "torch":
    from theanompi.models.keras_torch import KerasOnTorch as _OnBackend
else:
    from theanompi.models.keras_jax import KerasOnJax as _OnBackend  # type: ignore[assignment]

__all__ = ["BACKEND", "KerasClassifierModel", "keras"]


class KerasClassifierModel(_OnBackend):
    """Base ModelClass for ``keras.Model`` classifiers trained with momentum SGD on a ShardedArrayData."""

    def __init__(self, config):
        keras.utils.set_random_seed(config.seed)  # the same initial weights on every rank
        super().__init__(config)

    def build_network(self) -> keras.Model:
        """The network: a ``keras.Model`` mapping an input batch (``x_train``'s sample shape) to logits."""
        raise NotImplementedError

    @classmethod
    def _checked_network(cls, network: object):
        """``network`` (a built ``keras.Model``) made what the backend's base trains; ContractError for anything else.

        >>> KerasClassifierModel._checked_network([keras.layers.Dense(2)])
        Traceback (most recent call last):
        ...
        theanompi.core.errors.ContractError: KerasClassifierModel.build_network must return a keras.Model ...
        """
        if not isinstance(network, keras.Model):
            raise ContractError(f"{cls.__name__}.build_network must return a keras.Model mapping a batch to logits, "
                                f"not a {type(network).__name__} (wrap layers in keras.Sequential([...]))")
        if not network.built or not network.trainable_variables:
            raise ContractError(f"{cls.__name__}.build_network returned a keras.Model without weights: give it an "
                                "input shape (keras.Input(...)) or build it (model.build(shape))")
        return super()._checked_network(cls.adapt(network))

    @property
    def keras_model(self) -> keras.Model:
        """The Keras model :meth:`build_network` returned (on jax it keeps its initial values until
        ``trained_network()`` writes the current ones into it)."""
        return self.network.model
