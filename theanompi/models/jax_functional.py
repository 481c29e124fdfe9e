"""JaxFunctionalClassifier: the ModelClass contract for a network that is a pure function of JAX arrays.

What the JAX (Flax) and Keras-on-JAX ModelClasses share (:mod:`theanompi.models.jax_classifier`,
:mod:`theanompi.models.keras_classifier`): a subclass supplies the data (:meth:`~JaxFunctionalClassifier.build_data`,
usually ``self.shard(x_train, y_train, x_val, y_val)``) and the network, which
:meth:`~JaxFunctionalClassifier._checked_network` turns into a :class:`FunctionalNetwork` -- the network's arrays
(trainable params; the state it updates while training: batch-norm statistics, random-number counters) and a
pure function of them and a batch to logits. This class trains it with momentum SGD (v <- mu*v - lr*g; p <- p + v,
ClassifierModel's and TorchClassifierModel's arithmetic; weight decay added to the gradients of params of two or
more dimensions), every step one ``jax.jit``-compiled function:

* BSP ``cdd``: :meth:`~JaxFunctionalClassifier.train_iter` runs forward and backward and returns the gradient
  concatenated into one flat vector -- a NumPy view of the JAX array on a CPU, a CuPy view on a GPU (DLPack, no
  copy; a JAX array is read-only, so on a CPU the rule stages it into its exchange buffer, one copy);
  :meth:`~JaxFunctionalClassifier.apply_update` applies the mean of the workers' sum in a second compiled
  function (the 1/N folded in). JAX computes the whole gradient in one call, so there is no exchange overlapped
  with backward (no ``attach_reducer``).
* every other rule: the whole local step is one compiled function.

JAX arrays are immutable, so ``params`` are :class:`~theanompi.comm.array_cell.ArrayCell` s (one per trainable
array, named by the network), read before each step and given the step's new arrays after it (the old ones are
donated to the step); the rules, fused buffers, checkpoints and NaN checks read and write them through
:mod:`theanompi.comm.param_access`. ``state_vars`` -- what a checkpoint holds besides the params -- are the
learning rate (a 0-d cell), the momenta and the network's numeric state (``model_state``), so ``RESUME``
continues bit for bit; the floating-point state (batch-norm statistics) is averaged over the workers at each epoch
end (:meth:`~JaxFunctionalClassifier.sync_state`). The framework's own object (``network.model``) keeps its
initial arrays until :meth:`~JaxFunctionalClassifier.trained_network` writes the current ones into it.

The arrays live on jax's default device: the rank's GPU on a ``cudaN`` worker (the launcher pins it with
CUDA_VISIBLE_DEVICES; the GPU path is written but has not run on a GPU), the host on a ``cpuN`` one (the launcher
sets JAX_PLATFORMS=cpu). XLA sizes its CPU thread pool from the cores it sees: THREADS_PER_WORKER does not bound
it (jax 0.10 has no setting for it).

Example
-------
>>> import jax.numpy as jnp
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.data.digits import load_digits_split
>>> from theanompi.session.recorder import Recorder
>>> class Linear(FunctionalNetwork):
...     def __init__(self):
...         super().__init__(None, [("w", jnp.zeros((64, 10))), ("b", jnp.zeros(10))], [])
...     def apply(self, params, state, x, training):
...         w, b = params
...         return x @ w + b, state
>>> class Softmax(JaxFunctionalClassifier):
...     def build_data(self):
...         (xt, yt), (xv, yv) = load_digits_split()
...         return self.shard(xt, yt, xv, yv)
...     def build_network(self):
...         return Linear()
>>> model = Softmax(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"lr": 0.1}))
>>> [p.name for p in model.params], [v.name for v in model.state_vars]
(['w', 'b'], ['lr', 'velocity of w', 'velocity of b'])
>>> model.compile_iter_fns("cdd")
>>> vector = model.train_iter(0, Recorder(None))
>>> type(vector).__name__, vector.shape, vector.dtype, vector.flags.writeable   # a view of the JAX array
('ndarray', (650,), dtype('float32'), False)
>>> model.apply_update(vector)        # one worker: the sum is its own gradient
>>> round(float(abs(model.params[1].value).sum()), 6) > 0
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theanompi.backend import arrays
from theanompi.backend.compute import check_jax_device
from theanompi.comm.array_cell import ArrayCell
from theanompi.comm.fused_params import FlatLayout
from theanompi.comm.param_access import assign
from theanompi.core.errors import ContractError
from theanompi.models.hyperparams import ClassifierHyperParams, mean_over_workers


class FunctionalNetwork:
    """A network as a pure function of its arrays: what :class:`JaxFunctionalClassifier` trains.

    ``model`` is the framework's object (an ``nnx.Module``, a ``keras.Model``); ``params`` and ``state`` are
    ``(name, array)`` pairs of its trainable arrays and of the other arrays it updates while training, in the order
    :meth:`apply` takes them; :meth:`apply` is traced by ``jax.jit``; :meth:`write_back` puts arrays into ``model``.
    """

    def __init__(self, model: Any, params: Iterable[tuple[str, Any]], state: Iterable[tuple[str, Any]]) -> None:
        self.model = model
        self.params = list(params)
        self.state = list(state)

    def apply(self, params: list, state: list, x, training: bool) -> tuple[Any, list]:
        """Logits of batch ``x`` and the new state, from the arrays ``params`` and ``state`` (lists in the
        order of :attr:`params` and :attr:`state`); ``training`` switches dropout and batch-norm modes."""
        raise NotImplementedError

    def write_back(self, params: list, state: list) -> None:
        """Put the arrays ``params`` and ``state`` into :attr:`model`."""
        raise NotImplementedError


def softmax_cross_entropy(logits, y):
    """Mean cross-entropy of integer labels ``y`` under ``logits`` (traced)."""
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_p, y[:, None].astype(jnp.int32), axis=-1))


def momentum_sgd(params: list, velocities: list, grads: list, lr, mu: float) -> tuple[list, list]:
    """v <- mu*v - lr*g; p <- p + v (p <- p - lr*g without velocities): ClassifierModel's arithmetic (traced)."""
    if not velocities:
        return [p - lr * g for p, g in zip(params, grads)], []
    velocities = [mu * v - lr * g for v, g in zip(velocities, grads)]
    return [p + v for p, v in zip(params, velocities)], velocities


def _numeric(value) -> bool:
    """Whether a state array holds plain numbers (a checkpoint can hold it), not typed random keys."""
    if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        return False
    return np.dtype(value.dtype).kind in "biuf"


class JaxFunctionalClassifier(ClassifierHyperParams):
    """Base ModelClass for a :class:`FunctionalNetwork` classifier trained with momentum SGD on a ShardedArrayData
    (see the module docstring)."""

    # ----- construction ---------------------------------------------------------------
    def __init__(self, config):
        self.config = config
        self.hp = self.validate_options(config.model_options)
        self.n_epochs = self.hp["n_epochs"]
        check_jax_device(config.device)  # a cuda rank's jax sees its one GPU
        self.data = self.build_data()
        self.network = self._checked_network(self.build_network())
        # copies: the steps donate the cells' arrays, and the framework's object keeps its own
        self.params = [ArrayCell(jnp.array(v, copy=True), name) for name, v in self.network.params]
        self.state = [ArrayCell(jnp.array(v, copy=True), name) for name, v in self.network.state]
        self.lr = ArrayCell(jnp.asarray(self.hp["lr"], dtype=jnp.float32), "lr")
        self.velocities = [ArrayCell(jnp.zeros_like(p.value), f"velocity of {p.name}") for p in self.params
                           ] if self.hp["momentum"] else []
        #: the network's state a checkpoint holds (numbers: not typed random keys, which the seed rebuilds)
        self.model_state = [c for c in self.state if _numeric(c.value)]
        self.state_vars = [self.lr, *self.velocities, *self.model_state]
        self.decayed = [i for i, p in enumerate(self.params) if p.value.ndim > 1]  # weights, not biases
        self.sync_type = None
        self.layout = FlatLayout([p.value.shape for p in self.params])
        self._flat_grad = None  # the last cdd gradient (a JAX array), until apply_update

    def shard(self, x_train, y_train, x_val, y_val):
        """This worker's shard of in-memory arrays, labels as int32 (JAX's default integer)."""
        return super().shard(x_train, np.asarray(y_train, dtype=np.int32), x_val, np.asarray(y_val, dtype=np.int32))

    def build_data(self):
        raise NotImplementedError

    def build_network(self):
        """The network (what :meth:`_checked_network` accepts)."""
        raise NotImplementedError

    @classmethod
    def _checked_network(cls, network: object) -> FunctionalNetwork:
        """``network`` as a :class:`FunctionalNetwork`, else ContractError naming the class and what it returned
        (a subclass converts its framework's network here)."""
        if isinstance(network, FunctionalNetwork):
            return network
        raise ContractError(f"{cls.__name__}.build_network must return a FunctionalNetwork, "
                            f"not a {type(network).__name__}")

    def loss_and_error(self, logits, y):
        """Mean cross-entropy and error rate of a batch (traced: JAX arrays in, 0-d JAX arrays out)."""
        error = jnp.mean((jnp.argmax(logits, axis=-1) != y).astype(jnp.float32))
        return softmax_cross_entropy(logits, y), error

    # ----- compile --------------------------------------------------------------------
    def compile_iter_fns(self, sync_type: str | None = None) -> None:
        """jax.jit the step functions: for ``cdd`` the flat gradient and the update, else the local step; and the
        evaluation (each compiles at its first call)."""
        self.sync_type = sync_type
        dtypes = sorted({str(p.value.dtype) for p in self.params})
        if len(dtypes) != 1:
            raise ContractError(f"{type(self).__name__}: params must share one dtype to be fused; "
                                f"got {', '.join(dtypes)}")
        network, loss_and_error = self.network, self.loss_and_error
        decay, decayed, mu = self.hp["weight_decay"], set(self.decayed), self.hp["momentum"]

        def loss(params, state, x, y):
            logits, new_state = network.apply(params, state, x, True)
            value, error = loss_and_error(logits, y)
            return value, (jnp.stack([value, error]), new_state)

        def gradient(params, state, x, y):
            (_, (metrics, new_state)), grads = jax.value_and_grad(loss, has_aux=True)(params, state, x, y)
            if decay:
                grads = [g + decay * p if i in decayed else g for i, (p, g) in enumerate(zip(params, grads))]
            return grads, metrics, new_state

        def flat_gradient(params, state, x, y):
            grads, metrics, new_state = gradient(params, state, x, y)
            return jnp.concatenate([g.ravel() for g in grads]), metrics, new_state

        def local_step(params, velocities, state, lr, x, y):
            grads, metrics, new_state = gradient(params, state, x, y)
            params, velocities = momentum_sgd(params, velocities, grads, lr, mu)
            return params, velocities, new_state, metrics

        layout, size = self.layout, float(self.config.size)

        def apply_sum(params, velocities, flat_sum, lr):
            grads = [flat_sum[start:stop].reshape(shape)
                     for start, stop, shape in zip(layout.offsets, layout.offsets[1:], layout.shapes)]
            return momentum_sgd(params, velocities, grads, lr / size, mu)

        def evaluate(params, state, x, y):
            logits, _ = network.apply(params, state, x, False)
            return jnp.stack(loss_and_error(logits, y))

        if sync_type == "cdd":
            self._flat_gradient = jax.jit(flat_gradient, donate_argnums=(1,))
            self._apply_sum = jax.jit(apply_sum, donate_argnums=(0, 1))
        else:
            self._local_step = jax.jit(local_step, donate_argnums=(0, 1, 2))
        self._evaluate = jax.jit(evaluate)

    # ----- steps ----------------------------------------------------------------------
    def train_iter(self, count: int, recorder):
        self.step_lr(count)
        with recorder.timer("wait"):
            xb, yb = self.data.train_batch(count)
        params, state = _values(self.params), _values(self.state)
        if self.sync_type == "cdd":
            self._flat_grad, metrics, new_state = self._flat_gradient(params, state, xb, yb)
            _put(self.state, new_state)
            _record(recorder.record_train, metrics, len(yb))
            return self.update_vector()
        new_params, new_velocities, new_state, metrics = self._local_step(
            params, _values(self.velocities), state, self.lr.value, xb, yb)
        _put(self.params, new_params)
        _put(self.velocities, new_velocities)
        _put(self.state, new_state)
        _record(recorder.record_train, metrics, len(yb))
        return None

    def update_vector(self):
        """The last ``cdd`` gradient, flat, as an array sharing the JAX array's memory (DLPack, no copy): NumPy
        (read-only) on a CPU, CuPy on a GPU -- where the exchange sums into it in place (the JAX array is this
        model's own, fresh every step and read only by :meth:`apply_update`)."""
        if self._flat_grad is None:
            raise ContractError(f"{type(self).__name__}.update_vector before a cdd train_iter")
        return arrays.dlpack_view(self._flat_grad.block_until_ready())

    def apply_update(self, vector_sum) -> None:
        """Apply the sum over workers of their update vectors: the momentum step with their mean (one compiled
        function; a CuPy sum comes back to JAX through DLPack, a NumPy one is transferred)."""
        total = arrays.to_jax(vector_sum, dtype=self.params[0].value.dtype)
        new_params, new_velocities = self._apply_sum(_values(self.params), _values(self.velocities), total,
                                                     self.lr.value)
        _put(self.params, new_params)
        _put(self.velocities, new_velocities)
        self._flat_grad = None

    def val_iter(self, count: int, recorder) -> None:
        with recorder.timer("wait"):
            xb, yb = self.data.val_batch(count)
        _record(recorder.record_val, self._evaluate(_values(self.params), _values(self.state), xb, yb), len(yb))

    # ----- hyper-parameters -----------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        assign(self.lr, np.float32(lr))

    def learning_rate(self) -> float:
        """The learning rate of the last step (recorded in each epoch's record)."""
        return float(self.lr.value)

    def adjust_hyperp(self, epoch: int) -> None:
        self.data.set_epoch(epoch)
        self.start_epoch_lr(epoch)

    def running_stats(self) -> list[ArrayCell]:
        """The state :meth:`sync_state` averages: the network's floating-point state (batch-norm statistics)."""
        return [c for c in self.model_state if np.dtype(c.value.dtype).kind == "f"]

    def sync_state(self, comm) -> None:
        """Average :meth:`running_stats` over the workers (one allreduce; nothing without such state)."""
        mean_over_workers(self.running_stats(), comm)

    def trained_network(self):
        """The framework's object (``network.model``) holding the current params and state."""
        self.network.write_back(_values(self.params), _values(self.state))
        return self.network.model


def _values(cells: Sequence[ArrayCell]) -> list:
    return [c.value for c in cells]


def _put(cells: Sequence[ArrayCell], values: Sequence[Any]) -> None:
    for cell, value in zip(cells, values):
        cell.value = value


def _record(record, metrics, n: int) -> None:
    """Hand a compiled step's ``[loss, error]`` to the recorder (one transfer from the device)."""
    loss, error = np.asarray(metrics).tolist()
    record(loss, error, n)
