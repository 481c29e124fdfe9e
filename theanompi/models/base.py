"""ClassifierModel: the ModelClass contract implemented once for softmax classifiers.

A subclass supplies the data (:meth:`build_data`) and the network
(:meth:`build_network` -> params and logits); this class compiles the training
functions for BSP ``cdd`` (flat gradient out, update in a second function) and
for every other rule (one function that steps locally), momentum SGD with
optional weight decay, validation, and the learning rate of the session's schedule (LR_SCHEDULE with
LR_SCALING and WARMUP_EPOCHS) or of the model's own, set at every step where it changes.

Hyper-parameters come from ``config.model_options`` (cfg keys ``MODEL_*``),
parsed by the class's option table (:mod:`theanompi.models.model_options`; the
launcher calls :meth:`validate_options` before any rank starts; options, sharding
and LR scaling live in :class:`theanompi.models.hyperparams.ClassifierHyperParams`,
shared with the PyTorch base :class:`theanompi.models.torch_classifier.TorchClassifierModel`).

The session option ``COMPUTE`` picks the backend (``theanompi.backend.compute``): the C
backend, or pytensor's JAX mode with every shared variable kept as a ``jax.Array``
on the rank's device; then ``train_iter`` returns the ``cdd`` update vector as a
jax array and ``apply_update`` accepts NumPy, CuPy (DLPack) or jax arrays.

Example
-------
>>> class Softmax(ClassifierModel):
...     def build_data(self):
...         (xt, yt), (xv, yv) = load_digits_split()
...         return self.shard(xt, yt, xv, yv)
...     def build_network(self, x, rng):
...         W = pytensor.shared(np.zeros((64, 10), "float32"), name="W")
...         return [W], x @ W
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np
import pytensor
import pytensor.tensor as pt

from theanompi.backend import arrays
from theanompi.backend.compute import check_jax_device, keep_on_device, pytensor_mode, resolve_compute
from theanompi.backend.function_cache import cached_function
from theanompi.backend.ops.momentum import momentum_sgd
from theanompi.backend.ops.softmax_inline import inline_softmax  # noqa: F401  (registers the rewrite)
from theanompi.comm.fused_params import assign
from theanompi.models.data.digits import load_digits_split  # noqa: F401  (docstring example)
from theanompi.models.hyperparams import ClassifierHyperParams
from theanompi.nn import BatchNormLayer, get_all_layers, sync_running_stats

if TYPE_CHECKING:
    from pytensor.tensor.variable import TensorVariable


class ClassifierModel(ClassifierHyperParams):
    """Base ModelClass for classifiers trained with momentum SGD on a ShardedArrayData."""

    # ----- construction ---------------------------------------------------------------
    def __init__(self, config):
        self.config = config
        self.compute = resolve_compute(config.options.compute, config.device)
        self.hp = self.validate_options(config.model_options)
        self.n_epochs = self.hp["n_epochs"]
        self.floatX = pytensor.config.floatX
        self.data = self.build_data()
        self.x = pt.tensor("x", dtype=self.floatX, shape=(None,) + self.data.x_train.shape[1:])
        self.y = pt.ivector("y")
        rng = np.random.default_rng(config.seed)
        self.network = None  # a subclass built from theanompi.nn may keep its output layer here
        built = self.build_network(self.x, rng)
        self.params, self.logits = built[0], built[1]
        self.val_logits = built[2] if len(built) > 2 else self.logits
        self.n_classes = int(self.hp.get("n_classes", 10))
        self.lr = pytensor.shared(np.asarray(self.hp["lr"], dtype=self.floatX), name="lr")
        self._grad_fn = self._update_fn = self._train_fn = self._val_fn = None
        self.sync_type = None
        self.state_vars = [self.lr]  # checkpointed with params; the optimizer adds its velocities

    def build_data(self):
        raise NotImplementedError

    def build_network(self, x, rng):
        """Return (params, logits) for input variable ``x``, or (params, logits, val_logits) when
        validation needs a different graph (dropout off, batch-norm running statistics)."""
        raise NotImplementedError

    # ----- graph ----------------------------------------------------------------------
    def loss_and_error(self, logits=None):
        logits = self.logits if logits is None else logits
        width = logits.shape[1]
        if self.compute == "jax" and logits.type.shape[1] is None:
            width = self._static_width(logits)  # jax.numpy.arange needs a constant length
        columns = pt.arange(width)[None, :]
        onehot = pt.eq(self.y[:, None], columns).astype(self.floatX)
        loss = -pt.mean(pt.sum(onehot * pt.special.log_softmax(logits, axis=1), axis=1))
        error = pt.mean(pt.neq(pt.argmax(logits, axis=1), self.y))
        return loss, error

    def _static_width(self, logits) -> int:
        """The number of columns of ``logits`` (its shape follows from the params' current shapes)."""
        sample = np.zeros((1,) + tuple(self.data.x_train.shape[1:]), dtype=self.floatX)
        return int(pytensor.function([self.x], logits.shape[1], on_unused_input="ignore")(sample))

    def regularised(self, loss):
        wd = self.hp["weight_decay"]
        if wd:
            loss = loss + 0.5 * wd * sum(pt.sum(p ** 2) for p in self.params if p.ndim > 1)
        return loss

    def sgd_updates(self, grads):
        """Momentum SGD: v <- mu*v - lr*g; p <- p + v (plain SGD when momentum is 0).

        With momentum, all parameters update in one :func:`~theanompi.backend.ops.momentum_sgd` node.
        """
        mu = self.hp["momentum"]
        if not mu or not self.params:
            return [(p, (p - self.lr * g).astype(self.floatX)) for p, g in zip(self.params, grads)]
        velocities = [pytensor.shared(np.zeros_like(p.get_value()), name=f"v_{p.name}", shape=p.type.shape)
                      for p in self.params]
        self.state_vars.extend(velocities)
        new_params, new_velocities = momentum_sgd(self.params, velocities, grads, self.lr, mu)
        return list(zip(velocities, new_velocities)) + list(zip(self.params, new_params))

    def function(self, inputs, outputs, updates=None, trust_input: bool = False):
        """``pytensor.function`` in this model's compute mode (COMPUTE).

        ``trust_input`` (JAX mode only) passes arguments to the jitted function
        unchecked, so a device array argument stays on the device (pytensor's input
        check would copy it to the host); the caller supplies the declared dtype.
        """
        return cached_function(inputs, outputs, updates=updates, mode=pytensor_mode(self.compute),
                               trust_input=trust_input and self.compute == "jax")

    def compile_iter_fns(self, sync_type: str | None = None) -> None:
        """Compile validation plus, for ``cdd``, gradient and update functions; else one step function."""
        if self.compute == "jax":
            check_jax_device(self.config.device)
        self.sync_type = sync_type
        loss, error = self.loss_and_error()
        # a list of params in, a list of tensors out (pytensor.grad's annotation is a union for every wrt)
        grads = cast("list[TensorVariable]", pytensor.grad(self.regularised(loss), self.params))
        inputs = [self.x, self.y]
        if sync_type == "cdd":
            flat = pt.concatenate([g.ravel() for g in grads]).astype(self.floatX)
            self._grad_fn = self.function(inputs, [pytensor.Out(flat, borrow=True), loss, error])
            vector = pt.vector("update", dtype=self.floatX)
            pieces, start = [], 0
            for p in self.params:
                shape = p.get_value(borrow=True).shape
                size = int(np.prod(shape))
                pieces.append(vector[start:start + size].reshape(shape))
                start += size
            mean = [piece * np.asarray(1.0 / self.config.size, dtype=self.floatX) for piece in pieces]
            self._update_fn = self.function([vector], [], updates=self.sgd_updates(mean), trust_input=True)
        else:
            self._train_fn = self.function(inputs, [loss, error], updates=self.sgd_updates(grads))
        self._val_fn = self.function(inputs, list(self.loss_and_error(self.val_logits)))
        if self.compute == "jax":
            keep_on_device(self.params + self.state_vars)  # no host round trip per step

    # ----- contract -------------------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        assign(self.lr, np.asarray(lr, dtype=self.floatX))

    def learning_rate(self) -> float:
        """The learning rate of the last step (recorded in each epoch's record)."""
        return float(np.asarray(self.lr.get_value()))

    def _set_lr(self, epoch_progress: float) -> None:
        self.set_lr(self.scheduled_lr(epoch_progress))

    def adjust_hyperp(self, epoch: int) -> None:
        self.data.set_epoch(epoch)
        self.start_epoch_lr(epoch)

    def train_iter(self, count: int, recorder):
        self.step_lr(count)
        with recorder.timer("wait"):
            xb, yb = self.data.train_batch(count)
        if self.sync_type == "cdd":
            vector, loss, error = self._grad_fn(xb, yb)
            recorder.record_train(loss, error, len(yb))
            return vector
        loss, error = self._train_fn(xb, yb)
        recorder.record_train(loss, error, len(yb))
        return None

    def apply_update(self, vector_sum) -> None:
        """Apply the sum over workers of their update vectors (divided by N inside the graph).

        In JAX mode ``vector_sum`` may be a NumPy, CuPy or jax array; a CuPy buffer is
        handed to jax through DLPack (no copy, no host trip).
        """
        if self.compute == "jax":
            vector_sum = arrays.to_jax(vector_sum, dtype=self.floatX)
        self._update_fn(vector_sum)

    def val_iter(self, count: int, recorder) -> None:
        with recorder.timer("wait"):
            xb, yb = self.data.val_batch(count)
        loss, error = self._val_fn(xb, yb)
        recorder.record_val(loss, error, len(yb))

    def running_stats(self) -> list:
        """The network's batch-norm running statistics (each BatchNormLayer's ``mean`` and ``inv_std``): what
        :meth:`sync_state` pools and averaged weights average (AVERAGE_WEIGHTS=ema)."""
        if self.network is None:
            return []
        return [v for layer in get_all_layers(self.network) if isinstance(layer, BatchNormLayer)
                for v in (layer.mean, layer.inv_std)]

    def sync_state(self, comm) -> None:
        """Pool batch-norm running statistics over the workers (collective; see the layers' BN policy)."""
        if self.network is not None:
            sync_running_stats(self.network, comm)
