"""JaxClassifierModel: the ModelClass contract for a Flax ``nnx.Module`` classifier.

The JAX counterpart of :class:`theanompi.models.torch_classifier.TorchClassifierModel`: a subclass supplies the
data (:meth:`build_data`, usually ``self.shard(x_train, y_train, x_val, y_val)``) and the network
(:meth:`build_network`, a ``flax.nnx.Module`` mapping a batch to logits, built from ``nnx.Rngs(self.config.seed)``
so that every rank builds the same initial weights); :class:`~theanompi.models.jax_functional.JaxFunctionalClassifier`
trains it with momentum SGD (ClassifierModel's arithmetic), every step one ``jax.jit``-compiled function, under
every rule (BSP ``cdd`` exchanges one flat gradient). The module is split once into its parameters (``nnx.Param``,
the ``params``: one :class:`~theanompi.comm.array_cell.ArrayCell` each, named by its attribute path, e.g.
``conv.kernel``) and the rest of its state (batch-norm statistics, dropout's random-number counters), and merged
back inside the compiled step: ``module.train()`` / ``module.eval()`` choose the training and validation modes.
:meth:`~theanompi.models.jax_functional.JaxFunctionalClassifier.trained_network` gives the module with the current
values.

MODEL_* options: ``batch_size``, ``lr``, ``momentum``, ``weight_decay``, ``n_epochs`` (ClassifierModel's,
declared by :class:`theanompi.models.hyperparams.ClassifierHyperParams`; a subclass declares its own as
:mod:`theanompi.models.model_options` describes). Without flax installed, a ModelClass built on this module
fails at launch with one line naming the ``[jax]`` extra to install (``theanompi.models.loader``).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.data.digits import load_digits_split
>>> from theanompi.session.recorder import Recorder
>>> class Softmax(JaxClassifierModel):
...     def build_data(self):
...         (xt, yt), (xv, yv) = load_digits_split()
...         return self.shard(xt, yt, xv, yv)
...     def build_network(self):
...         return nnx.Linear(64, 10, rngs=nnx.Rngs(self.config.seed))
>>> model = Softmax(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"lr": 0.1}))
>>> [p.name for p in model.params], model.data.y_train.dtype
(['bias', 'kernel'], dtype('int32'))
>>> model.compile_iter_fns("local")
>>> model.train_iter(0, Recorder(None))
>>> bool((model.trained_network().bias[...] != 0).any())   # the module holds the trained values
True
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from theanompi.core.errors import ContractError
from theanompi.models.jax_functional import FunctionalNetwork, JaxFunctionalClassifier


def _path_name(path) -> str:
    """``conv.kernel`` for the tree path of an nnx variable's value (its attribute names and list indices)."""
    keys = [getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))) for k in path]
    if keys and keys[-1] == "value":
        keys = keys[:-1]
    return ".".join(str(k) for k in keys)


class NnxNetwork(FunctionalNetwork):
    """An ``nnx.Module`` as a :class:`~theanompi.models.jax_functional.FunctionalNetwork`: split once into its
    ``nnx.Param`` s and the rest of its state, merged back (in training or evaluation mode) inside the step."""

    def __init__(self, module: nnx.Module) -> None:
        module.eval()
        self._eval_graph = nnx.graphdef(module)
        module.train()
        self._train_graph, params, *rest = nnx.split(module, nnx.Param, ...)
        (state,) = rest  # everything but the params
        flat_params, self._params_tree = jax.tree_util.tree_flatten_with_path(params)
        flat_state, self._state_tree = jax.tree_util.tree_flatten_with_path(state)
        super().__init__(module, [(_path_name(p), v) for p, v in flat_params],
                         [(_path_name(p), v) for p, v in flat_state])

    def apply(self, params: list, state: list, x, training: bool) -> tuple[Any, list]:
        module = nnx.merge(self._train_graph if training else self._eval_graph,
                           jax.tree.unflatten(self._params_tree, params), jax.tree.unflatten(self._state_tree, state))
        logits = module(x)
        return logits, jax.tree.leaves(nnx.state(module, nnx.Not(nnx.Param)))

    def write_back(self, params: list, state: list) -> None:
        nnx.update(self.model, jax.tree.unflatten(self._params_tree, params),
                   jax.tree.unflatten(self._state_tree, state))


class JaxClassifierModel(JaxFunctionalClassifier):
    """Base ModelClass for ``flax.nnx.Module`` classifiers trained with momentum SGD on a ShardedArrayData."""

    def build_network(self) -> nnx.Module:
        """The network: an ``nnx.Module`` mapping an input batch (``x_train``'s sample shape) to logits, built from
        ``nnx.Rngs(self.config.seed)``."""
        raise NotImplementedError

    @classmethod
    def _checked_network(cls, network: object) -> FunctionalNetwork:
        """``network`` (an ``nnx.Module``) split for the compiled steps; ContractError for anything else.

        >>> JaxClassifierModel._checked_network([nnx.Linear(2, 2, rngs=nnx.Rngs(0))])
        Traceback (most recent call last):
        ...
        theanompi.core.errors.ContractError: JaxClassifierModel.build_network must return a flax.nnx.Module ...
        """
        if isinstance(network, nnx.Module):
            return NnxNetwork(network)
        raise ContractError(f"{cls.__name__}.build_network must return a flax.nnx.Module mapping a batch to "
                            f"logits, not a {type(network).__name__} (wrap layers in nnx.Sequential(...))")
