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
  With :meth:`attach_reducer` (BSP does it unless ``BSP_BUCKET_MB=0``) the sum
  overlaps backward: each param's autograd hook (``register_post_accumulate_grad_hook``)
  reports its gradient final, and a bucket of params' slice of the buffer starts its
  allreduce as soon as the bucket is complete (:mod:`theanompi.comm.exchange.overlap`).
* every other rule: :meth:`train_iter` steps locally.

Weight decay is added by the same hook, to each gradient backward produced (a
param the loss does not reach gets neither, as with ``torch.optim.SGD``).

``params`` are the module's trainable ``nn.Parameter`` s (each named by its
``named_parameters`` name in ``param_name``), ``state_vars`` the learning rate
(a 0-d tensor) and the momentum buffers: the rules, fused buffers, checkpoints
and NaN checks read and write them in place through :mod:`theanompi.comm.param_access`.
``config.seed`` seeds torch before :meth:`build_network`, so every rank builds
the same initial weights. Each rank's torch intra-op pool gets THREADS_PER_WORKER
threads (the launcher resolves 0 to cores / local ranks and passes it to the rank
as ``OMP_NUM_THREADS``). A ``cudaN`` device puts the module, its flat gradient
buffer and the momenta on the rank's GPU; BSP ``cdd`` then exchanges the flat
gradient in place: :meth:`update_vector` is a CuPy view of it (DLPack, no copy),
NCCL or CUDA-aware MPI sums into it, and :meth:`apply_update` reads the sum back
as a torch tensor (DLPack again). On a CPU the same hand-over goes through NumPy
views (the path the tests run here; the GPU one has not run on a GPU yet).

MODEL_* options: ``batch_size``, ``lr``, ``momentum``, ``weight_decay``, ``n_epochs``
(ClassifierModel's, declared by :class:`theanompi.models.hyperparams.ClassifierHyperParams`; a subclass declares
its own as :mod:`theanompi.models.model_options` describes).

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
from theanompi.core.devices import parse_devices
from theanompi.core.errors import ContractError
from theanompi.models.hyperparams import ClassifierHyperParams, mean_over_workers
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

    @classmethod
    def _checked_network(cls, network: object) -> torch.nn.Module:
        """``network`` if :meth:`build_network` returned a ``torch.nn.Module``, else ContractError saying what.

        >>> TorchClassifierModel._checked_network([torch.nn.Linear(2, 2)])
        Traceback (most recent call last):
        ...
        theanompi.core.errors.ContractError: TorchClassifierModel.build_network must return a torch.nn.Module ...
        """
        if isinstance(network, torch.nn.Module):
            return network
        raise ContractError(f"{cls.__name__}.build_network must return a torch.nn.Module mapping a batch to logits, "
                            f"not a {type(network).__name__} (wrap layers in torch.nn.Sequential(...))")

    # ----- construction ---------------------------------------------------------------
    def __init__(self, config):
        self.config = config
        self.hp = self.validate_options(config.model_options)
        self.n_epochs = self.hp["n_epochs"]
        set_intra_op_threads()
        self.device = torch_device(config.device)
        self.data = self.build_data()
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        self.network = self._checked_network(self.build_network()).to(self.device)
        named = self.named_params()
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
        self._grad_hooks = []  # the params' autograd hooks (compile_iter_fns registers them)
        self._reducer = None  # BSP cdd's overlapped exchange, once attach_reducer gave it one

    def shard(self, x_train, y_train, x_val, y_val):
        """This worker's shard of in-memory arrays, labels as int64 (what ``cross_entropy`` takes)."""
        return super().shard(x_train, np.asarray(y_train, dtype=np.int64), x_val, np.asarray(y_val, dtype=np.int64))

    def build_data(self):
        raise NotImplementedError

    def build_network(self) -> torch.nn.Module:
        """The network: a module mapping an input batch (``x_train``'s sample shape) to logits."""
        raise NotImplementedError

    def named_params(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The trainable parameters of :attr:`network` and their names: ``params``, in this order."""
        return [(name, p) for name, p in self.network.named_parameters() if p.requires_grad]

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
        for handle in self._grad_hooks:
            handle.remove()
        self._grad_hooks = [p.register_post_accumulate_grad_hook(self._gradient_final_hook(i))
                            for i, p in enumerate(self.params)]

    def _gradient_final_hook(self, i: int):
        """The autograd hook run once backward has accumulated params[``i``]'s gradient: add its weight decay, then
        tell the overlapped exchange (if any) that this slice of the update vector is final."""
        decay = self.hp["weight_decay"] if i in self.decayed else 0.0

        def gradient_final(param: torch.Tensor) -> None:
            grad = param.grad
            if grad is None or grad.data_ptr() != self._grad_ptrs[i]:
                raise self._replaced_grad_error()
            if decay:
                with torch.no_grad():
                    grad.add_(param, alpha=decay)
            if self._reducer is not None:
                self._reducer.ready(i)

        return gradient_final

    def _replaced_grad_error(self) -> RuntimeError:
        return RuntimeError(f"{type(self).__name__}: a param's .grad was replaced (zero_grad(set_to_none=True)?); "
                            "TorchClassifierModel owns the gradients")

    def attach_reducer(self, reducer) -> None:
        """BSP ``cdd``'s overlapped exchange: sum the flat gradient bucket by bucket while backward runs.

        ``reducer`` (a :class:`theanompi.comm.exchange.overlap.OverlappedAllreduce`) is bound to the update vector
        (:meth:`update_vector`, this model's own buffer); from then on every param's autograd hook reports its
        gradient final (weight decay added) with ``reducer.ready(i)``, and the rule waits with ``reducer.finish()``
        instead of exchanging the vector :meth:`train_iter` returns."""
        if self.flat_grad is None:
            raise ContractError(f"{type(self).__name__}.attach_reducer before compile_iter_fns('cdd')")
        reducer.bind(self.update_vector())
        self._reducer = reducer

    # ----- steps ----------------------------------------------------------------------
    def _gradient(self, xb, yb):
        """Forward and backward on one batch: the gradient (weight decay included, added by each param's hook) lands
        in :attr:`flat_grad`."""
        x = torch.from_numpy(xb).to(self.device, non_blocking=True)
        y = torch.from_numpy(yb).to(self.device, non_blocking=True).long()  # any DataClass's int labels
        self.network.train()
        self.flat_grad.zero_()
        logits = self.network(x)
        loss, error = self.loss_and_error(logits, y)
        loss.backward()
        grads = [p.grad for p in self.params]
        if [g.data_ptr() if g is not None else 0 for g in grads] != self._grad_ptrs:
            raise self._replaced_grad_error()
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
        self.step_lr(count)
        with recorder.timer("wait"):
            xb, yb = self.data.train_batch(count)
        grads, loss, error = self._gradient(xb, yb)
        recorder.record_train(float(loss), float(error), len(yb))
        if self.sync_type == "cdd":
            return self.update_vector()
        self._sgd_step(grads, float(self.lr))
        return None

    def update_vector(self):
        """The flat gradient as an array sharing its memory (DLPack, no copy): NumPy on a CPU, CuPy on a GPU.

        The rule's exchange may sum into it in place (it is this model's own buffer, zeroed every step)."""
        return arrays.dlpack_view(self.flat_grad)

    def apply_update(self, vector_sum) -> None:
        """Apply the sum over workers of their update vectors: the momentum step with their mean.

        A NumPy or CuPy sum becomes a torch tensor through DLPack (no copy; the exchanged buffer is usually
        :attr:`flat_grad` itself); a sum in host memory goes to a GPU module's device once."""
        kind = arrays.kind(vector_sum)
        if kind == "cupy" or (kind == "numpy" and vector_sum.flags.writeable and vector_sum.flags.c_contiguous):
            total = torch.from_dlpack(vector_sum)
        else:  # a read-only or strided NumPy array, a jax array: copied to a fresh host array
            total = torch.from_numpy(np.array(arrays.to_host(vector_sum)))
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
    def set_lr(self, lr: float) -> None:
        self.lr.fill_(lr)

    def learning_rate(self) -> float:
        """The learning rate of the last step (recorded in each epoch's record)."""
        return float(self.lr)

    def adjust_hyperp(self, epoch: int) -> None:
        self.data.set_epoch(epoch)
        self.start_epoch_lr(epoch)

    def running_stats(self) -> list[torch.Tensor]:
        """The state :meth:`sync_state` averages: the module's floating-point buffers (batch-norm statistics)."""
        return [b for b in self.network.buffers() if b.is_floating_point()]

    def sync_state(self, comm) -> None:
        """Average :meth:`running_stats` (batch-norm running statistics) over the workers.

        One allreduce of one float64 buffer (``comm.allreduce``, as the pytensor layers' BN sync does).
        """
        mean_over_workers(self.running_stats(), comm)
