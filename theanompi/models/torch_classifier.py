"""TorchClassifierModel: the ModelClass contract for a ``torch.nn.Module`` classifier.

The PyTorch counterpart of :class:`theanompi.models.base.ClassifierModel`: a
subclass supplies the data (:meth:`build_data`, usually ``self.shard(x_train,
y_train, x_val, y_val)``) and the network (:meth:`build_network`, a
``torch.nn.Module`` mapping a batch to logits); this class trains it with
momentum SGD (v <- mu*v - lr*g; p <- p + v, the same arithmetic as
ClassifierModel) and optional weight decay on weights of two or more
dimensions, under every rule:

* BSP ``cdd``: :meth:`train_iter` runs forward and backward and returns the
  flat gradient -- the params' ``.grad`` tensors are views of one flat buffer,
  so backward writes the fused update vector in place and the rule allreduces
  it without a copy; :meth:`apply_update` applies the mean of the workers' sum.
* every other rule: :meth:`train_iter` steps locally.

``params`` are the module's trainable ``nn.Parameter`` s (each named by its
``named_parameters`` name in ``param_name``), ``state_vars`` the learning rate
(a 0-d tensor) and the momentum buffers: the rules, fused buffers, checkpoints
and NaN checks read and write them in place through :mod:`theanompi.comm.param_access`.
``config.seed`` seeds torch before :meth:`build_network`, so every rank builds
the same initial weights. Each rank's torch intra-op pool gets THREADS_PER_WORKER
threads (the launcher resolves 0 to cores / local ranks and passes it to the rank
as ``OMP_NUM_THREADS``). A ``cudaN`` device puts the module on the rank's GPU;
its tensors reach CuPy/NCCL through DLPack (written for, not run on, this CPU-only
project machine).

MODEL_* options: ``batch_size``, ``lr``, ``momentum``, ``weight_decay``, ``n_epochs``
(ClassifierModel's defaults and checks, from
:class:`theanompi.models.hyperparams.ClassifierHyperParams`).

Without torch installed, a ModelClass built on this module fails at launch with
one line naming the ``[torch]`` extra to install (``theanompi.models.loader``).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.models.data.digits import load_digits_split
>>> class Softmax(TorchClassifierModel):
...     def build_data(self):
...         (xt, yt), (xv, yv) = load_digits_split()
...         return self.shard(xt, yt, xv, yv)
...     def build_network(self):
...         return torch.nn.Linear(64, 10)
>>> model = Softmax(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"lr": 0.1}))
>>> [p.param_name for p in model.params], model.data.y_train.dtype
(['weight', 'bias'], dtype('int64'))
>>> model.compile_iter_fns("cdd")
>>> vector = model.train_iter(0, Recorder(None))
>>> vector.shape, vector.dtype
((650,), dtype('float32'))
>>> model.apply_update(vector)        # one worker: the sum is its own gradient
"""

from __future__ import annotations

import os

import numpy as np
import torch  # absolute import: the real PyTorch, not this module

from theanompi.backend import arrays
from theanompi.comm.fused_params import FlatLayout
from theanompi.comm.param_access import assign, host_copy
from theanompi.core.devices import parse_devices
from theanompi.core.errors import ContractError
from theanompi.models.hyperparams import ClassifierHyperParams
from theanompi.session.recorder import Recorder  # noqa: F401  (docstring example)


def set_intra_op_threads() -> int:
    """Size torch's intra-op pool like the rank's BLAS/OpenMP pool (``OMP_NUM_THREADS``); returns the size."""
    threads = int(os.environ.get("OMP_NUM_THREADS") or 0)
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def torch_device(device: str) -> torch.device:
    """The torch device of a theanompi device name: ``cudaN`` -> the rank's GPU (pinned by CUDA_VISIBLE_DEVICES)."""
    return torch.device("cuda", 0) if parse_devices(device)[0].is_cuda else torch.device("cpu")


class TorchClassifierModel(ClassifierHyperParams):
    """Base ModelClass for ``torch.nn.Module`` classifiers trained with momentum SGD on a ShardedArrayData."""

    # ----- construction ---------------------------------------------------------------
    def __init__(self, config):
        self.config = config
        self.hp = self.validate_options(config.model_options)
        self.n_epochs = self.hp["n_epochs"]
        set_intra_op_threads()
        self.device = torch_device(config.device)
        self.data = self.build_data()
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        self.network = self.build_network().to(self.device)
        named = [(name, p) for name, p in self.network.named_parameters() if p.requires_grad]
        for name, p in named:
            p.param_name = name
        self.params = [p for _, p in named]
        self.lr = torch.tensor(float(self.hp["lr"]), dtype=torch.float32)
        mu = self.hp["momentum"]
        self.velocities = [torch.zeros_like(p, memory_format=torch.contiguous_format) for p in self.params
                           ] if mu else []
        self.state_vars = [self.lr, *self.velocities]  # checkpointed with params
        self.decayed = [i for i, p in enumerate(self.params) if p.dim() > 1]  # weight decay: weights, not biases
        self.sync_type = None
        self.flat_grad = None
        self._epoch = 0
        self._warmup_this_epoch = False

    def shard(self, x_train, y_train, x_val, y_val):
        """This worker's shard of in-memory arrays, labels as int64 (what ``cross_entropy`` takes)."""
        return super().shard(x_train, np.asarray(y_train, dtype=np.int64), x_val, np.asarray(y_val, dtype=np.int64))

    def build_data(self):
        raise NotImplementedError

    def build_network(self) -> torch.nn.Module:
        """The network: a module mapping an input batch (``x_train``'s sample shape) to logits."""
        raise NotImplementedError

    def loss_and_error(self, logits, y):
        """Mean cross-entropy and error rate of a batch (tensors)."""
        loss = torch.nn.functional.cross_entropy(logits, y)
        error = (logits.argmax(dim=1) != y).float().mean()
        return loss, error

    # ----- compile --------------------------------------------------------------------
    def compile_iter_fns(self, sync_type: str | None = None) -> None:
        """Point every param's ``.grad`` into one flat buffer (the ``cdd`` update vector); nothing to compile."""
        self.sync_type = sync_type
        dtypes = sorted({str(p.dtype) for p in self.params})
        if len(dtypes) != 1:
            raise ContractError(f"{type(self).__name__}: params must share one dtype to be fused; "
                                f"got {', '.join(dtypes)}")
        self.flat_grad = torch.zeros(sum(p.numel() for p in self.params), dtype=self.params[0].dtype,
                                     device=self.device)
        self._grad_ptrs, start = [], 0
        for p in self.params:
            p.grad = self.flat_grad[start:start + p.numel()].view_as(p)
            self._grad_ptrs.append(p.grad.data_ptr())
            start += p.numel()

    # ----- steps ----------------------------------------------------------------------
    def _gradient(self, xb, yb):
        """Forward and backward on one batch: the gradient (weight decay included) lands in :attr:`flat_grad`."""
        x = torch.from_numpy(xb).to(self.device, non_blocking=True)
        y = torch.from_numpy(yb).to(self.device, non_blocking=True).long()  # any DataClass's int labels
        self.network.train()
        self.flat_grad.zero_()
        logits = self.network(x)
        loss, error = self.loss_and_error(logits, y)
        loss.backward()
        grads = [p.grad for p in self.params]
        if [g.data_ptr() if g is not None else 0 for g in grads] != self._grad_ptrs:
            raise RuntimeError(f"{type(self).__name__}: a param's .grad was replaced (zero_grad(set_to_none=True)?); "
                               "TorchClassifierModel owns the gradients")
        wd = self.hp["weight_decay"]
        if wd and self.decayed:
            with torch.no_grad():
                torch._foreach_add_([grads[i] for i in self.decayed], [self.params[i] for i in self.decayed], alpha=wd)
        return grads, loss.detach(), error

    def _sgd_step(self, grads, lr: float) -> None:
        """v <- mu*v - lr*g; p <- p + v (p <- p - lr*g without momentum)."""
        with torch.no_grad():
            if self.velocities:
                torch._foreach_mul_(self.velocities, self.hp["momentum"])
                torch._foreach_add_(self.velocities, grads, alpha=-lr)
                torch._foreach_add_(self.params, self.velocities)
            else:
                torch._foreach_add_(self.params, grads, alpha=-lr)

    def train_iter(self, count: int, recorder):
        if self._warmup_this_epoch:
            self._set_lr(self._epoch + count / self.data.n_batch_train)
        with recorder.timer("wait"):
            xb, yb = self.data.train_batch(count)
        grads, loss, error = self._gradient(xb, yb)
        recorder.record_train(float(loss), float(error), len(yb))
        if self.sync_type == "cdd":
            return self.update_vector()
        self._sgd_step(grads, float(self.lr))
        return None

    def update_vector(self):
        """The flat gradient as an array sharing its memory: NumPy on a CPU, CuPy (DLPack) on a GPU."""
        if self.flat_grad.is_cuda:
            import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)

            return cupy.from_dlpack(self.flat_grad)
        return self.flat_grad.numpy()

    def apply_update(self, vector_sum) -> None:
        """Apply the sum over workers of their update vectors: the momentum step with their mean."""
        if arrays.is_cupy(vector_sum):
            total = torch.from_dlpack(vector_sum)
        else:
            total = torch.from_numpy(np.ascontiguousarray(arrays.to_host(vector_sum)))
        total = total.to(self.device, non_blocking=True)
        grads, start = [], 0
        for p in self.params:
            grads.append(total[start:start + p.numel()].view_as(p))
            start += p.numel()
        self._sgd_step(grads, float(self.lr) / self.config.size)

    def val_iter(self, count: int, recorder) -> None:
        with recorder.timer("wait"):
            xb, yb = self.data.val_batch(count)
        self.network.eval()
        with torch.no_grad():
            x = torch.from_numpy(xb).to(self.device, non_blocking=True)
            y = torch.from_numpy(yb).to(self.device, non_blocking=True).long()  # any DataClass's int labels
            loss, error = self.loss_and_error(self.network(x), y)
        recorder.record_val(float(loss), float(error), len(yb))

    # ----- hyper-parameters -----------------------------------------------------------
    def _set_lr(self, epoch_progress: float) -> None:
        self.lr.fill_(self.hp["lr"] * self.lr_multiplier(epoch_progress))

    def adjust_hyperp(self, epoch: int) -> None:
        self._epoch = epoch
        self.data.set_epoch(epoch)
        self._set_lr(float(epoch))
        self._warmup_this_epoch = self.warming_up(epoch)

    def running_stats(self) -> list[torch.Tensor]:
        """The state :meth:`sync_state` averages: the module's floating-point buffers (batch-norm statistics)."""
        return [b for b in self.network.buffers() if b.is_floating_point()]

    def sync_state(self, comm) -> None:
        """Average :meth:`running_stats` (batch-norm running statistics) over the workers.

        One allreduce of one float64 buffer (``comm.allreduce``, as the pytensor layers' BN sync does).
        """
        buffers = self.running_stats()
        if not buffers:
            return
        values = [host_copy(b) for b in buffers]
        layout = FlatLayout([v.shape for v in values])
        packed = layout.pack(values, np.empty(layout.total, dtype=np.float64))
        total = np.asarray(comm.allreduce(packed), dtype=np.float64) / comm.Get_size()
        for buf, value in zip(buffers, layout.views(total)):
            assign(buf, value)

    def cleanup(self) -> None:
        """Close the data (stops a prefetch thread, closes files)."""
        close = getattr(self.data, "close", None)
        if callable(close):
            close()
