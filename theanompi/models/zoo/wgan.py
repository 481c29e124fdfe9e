"""WGAN: a Wasserstein GAN (Arjovsky, Chintala & Bottou 2017) on the digits' 8x8 images (real data).

Networks (``critic_hidden`` / ``gen_hidden`` = ``"128,128"``, ``z_dim`` = 16)::

    critic     image (64 pixels in [0, 1]) -> dense(128) + leaky relu -> dense(128) + leaky relu -> dense(1)
    generator  z ~ N(0, I_16) -> dense(128) + relu -> dense(128) + relu -> dense(64) + sigmoid

Training (Algorithm 1 of the paper): RMSProp (``lr``, ``rho``), the critic's
weights clipped to ``[-clip, clip]`` after every critic step, ``n_critic`` critic
steps per generator step. The critic maximises the Wasserstein estimate
``W = mean f(x_real) - mean f(G(z))``; the generator minimises ``-mean f(G(z))``.
The critic's forward pass also reads its weights through ``clip(w, -c, c)``
(the identity, gradient included, for weights inside the box): under rules that
move the parameters by other means (ASGD's server-side updaters, sums of ASGD
deltas) the critic stays a 1/c-box-constrained function all the same.

Iteration ``i`` of the session (``epoch * n_batch_train + count``) is a critic step
unless ``i % (n_critic + 1) == n_critic``; every worker agrees on it. Each
iteration draws one batch of real images (generator steps use only its size) and
``z`` from a generator seeded by (``SEED``, rank, epoch, count).

The contract, implemented directly (this is not a classifier):

* ``params`` = critic params + generator params (one float32 list; every rule
  exchanges/averages all of them).
* BSP ``cdd``: ``train_iter`` returns one flat vector over *all* params: the
  critic's gradient (of ``-W``) with zeros for the generator in critic steps,
  zeros for the critic and the generator's gradient in generator steps;
  ``apply_update(sum)`` applies ``sum / N`` with the phase's RMSProp (and clips
  the critic). Other rules: ``train_iter`` does the whole step.
* JAX mode (a cuda rank, or ``COMPUTE=jax``): its functions compile in the rank's
  default mode, its shared variables live on the device, and ``apply_update``
  hands the sum to jax as it comes (a CuPy buffer through DLPack, no copy).
* ``record_train(loss, error, n)`` / ``record_val``: **loss** is the critic's
  Wasserstein estimate ``W`` on the batch (validation: on the validation images
  against the same number of generated images from fixed ``z``). **error** is not
  a classification error: it is the *pixel-mean gap*, the mean over the 64
  pixels of ``|mean of the real images - mean of the generated images|`` (in
  pixel units, [0, 1]; 0 when the generator matches the data's mean image;
  sampling noise alone leaves about 0.03 for batches of 64). The progress line's
  "acc" is therefore 1 - gap, and ``final_val_accuracy`` in ``summary.json`` is
  1 - the validation gap.

Model options (cfg ``MODEL_*``): ``batch_size`` (64), ``lr`` (0.0002),
``rho`` (0.9), ``clip`` (0.1), ``n_critic`` (5), ``z_dim`` (16),
``critic_hidden``, ``gen_hidden``, ``train_size``/``val_size`` (0: all digits),
``n_epochs`` (30). ``LR_SCALING`` does not apply.

What it reaches (1 worker, defaults, seeds 0-3): the pixel-mean gap of 1,000
samples falls from 0.29-0.32 at initialisation to 0.10-0.11 after 15 epochs (360
steps), 0.07-0.08 after 20 and 0.066-0.083 after 30 epochs; the samples' per-pixel standard deviation
stays at about half the data's (no collapse onto the mean image). The critic's
estimate W rises while the critic learns (to about 2.5-4) and falls as the
generator catches up (about 0.5 after 30 epochs).

cfg::

    RULE=BSP
    MODELFILE=theanompi.models.zoo.wgan
    MODELCLASS=WGAN
    DEVICES=cpu0,cpu1
    N_EPOCHS=30

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> from theanompi.session.recorder import Recorder
>>> gan = WGAN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0",
...                        model_options={"critic_hidden": 16, "gen_hidden": 16}))
>>> gan.compile_iter_fns("local"); gan.adjust_hyperp(0)
>>> gan.train_iter(0, Recorder(None)) is None, gan.sample(3).shape
(True, (3, 64))
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import clone_replace

import theanompi.models.layers as L
from theanompi.backend import arrays
from theanompi.backend.compute import default_compute
from theanompi.core.options import predicate_parser
from theanompi.models.base import ClassifierModel
from theanompi.models.contract import WorkerConfig
from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.digits import load_digits_split
from theanompi.models.zoo import int_list_check, is_int, is_number, parse_int_list, subset

if TYPE_CHECKING:
    from pytensor.tensor.variable import TensorVariable


class WGAN:
    """Wasserstein GAN on the digits images: critic + generator, RMSProp, weight clipping, n_critic."""

    defaults: dict[str, Any] = {"batch_size": 64, "lr": 0.0002, "rho": 0.9, "clip": 0.1, "n_critic": 5,
                                "z_dim": 16, "critic_hidden": "128,128", "gen_hidden": "128,128", "train_size": 0,
                                "val_size": 0, "n_epochs": 30}
    checks = {
        "rho": predicate_parser(lambda v: is_number(v) and v < 1, "a number in [0, 1)"),
        "clip": predicate_parser(lambda v: is_number(v) and v > 0, "a number > 0"),
        "n_critic": predicate_parser(lambda v: is_int(v, 1), "an integer >= 1"),
        "z_dim": predicate_parser(lambda v: is_int(v, 1), "an integer >= 1"),
        "critic_hidden": int_list_check(), "gen_hidden": int_list_check(),
        "train_size": predicate_parser(lambda v: is_int(v, 0), "an integer >= 0 (0: all)"),
        "val_size": predicate_parser(lambda v: is_int(v, 0), "an integer >= 0 (0: all)"),
    }
    #: Unknown names and bad values end with a ConfigError at launch (ClassifierModel's checks).
    validate_options = inspect.getattr_static(ClassifierModel, "validate_options")  # the classmethod, bound to WGAN

    EPS = 1e-6

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.hp = self.validate_options(config.model_options)
        self.n_epochs = self.hp["n_epochs"]
        self.floatX = pytensor.config.floatX
        (xt, yt), (xv, yv) = load_digits_split(flat=True, dtype=self.floatX)

        x_train, y_train = subset(xt, yt, self.hp["train_size"])
        x_val, y_val = subset(xv, yv, self.hp["val_size"])
        self.data = ShardedArrayData(x_train, y_train, x_val, y_val, self.hp["batch_size"], config.rank, config.size,
                                     config.seed)
        self.n_pixels = xt.shape[1]
        self.data_mean = xt.mean(axis=0)
        L.init.set_rng(np.random.default_rng(config.seed))  # identical networks on every rank
        self.critic_in = L.InputLayer((None, self.n_pixels), name="critic_in")
        net: L.Layer = self.critic_in
        leaky = L.nonlinearities.LeakyRectify(0.2)
        for i, h in enumerate(parse_int_list(self.hp["critic_hidden"]), start=1):
            net = L.DenseLayer(net, h, nonlinearity=leaky, W=L.init.HeNormal("relu"), name=f"critic{i}")
        self.critic = L.DenseLayer(net, 1, nonlinearity=None, name="critic_out")
        self.gen_in = L.InputLayer((None, self.hp["z_dim"]), name="z")
        net = self.gen_in
        for i, h in enumerate(parse_int_list(self.hp["gen_hidden"]), start=1):
            net = L.DenseLayer(net, h, W=L.init.HeNormal("relu"), name=f"gen{i}")
        self.generator = L.DenseLayer(net, self.n_pixels, nonlinearity=L.nonlinearities.sigmoid, name="gen_out")
        clip = self.hp["clip"]
        for p in L.get_all_params(self.critic, trainable=True):  # start inside the box
            p.set_value(np.clip(p.get_value(), -clip, clip))
        self.critic_params = L.get_all_params(self.critic, trainable=True)
        self.gen_params = L.get_all_params(self.generator, trainable=True)
        self.params = self.critic_params + self.gen_params
        self.sizes = [int(p.get_value(borrow=True).size) for p in self.params]
        self.n_critic_flat = sum(self.sizes[:len(self.critic_params)])
        self.lr = pytensor.shared(np.asarray(self.hp["lr"], dtype=self.floatX), name="lr")
        self.accumulators = [pytensor.shared(np.zeros_like(p.get_value()), name=f"rms_{p.name}") for p in self.params]
        self.state_vars = [self.lr] + self.accumulators
        self.sync_type: str | None = None
        self._epoch = 0
        self._phase: str | None = None
        self._fns: dict[str, Any] = {}

    # ----- graph ------------------------------------------------------------------------
    def _graph(self):
        x = pt.matrix("x", dtype=self.floatX)
        z = pt.matrix("z", dtype=self.floatX)
        fake = L.get_output(self.generator, z)
        c = np.asarray(self.hp["clip"], dtype=self.floatX)
        box = {p: pt.clip(p, -c, c) for p in self.critic_params}
        d_real, d_fake = (clone_replace(L.get_output(self.critic, {self.critic_in: v}), replace=box)
                          for v in (x, fake))
        w_estimate = pt.mean(d_real) - pt.mean(d_fake)
        gap = pt.mean(pt.abs(pt.mean(x, axis=0) - pt.mean(fake, axis=0)))
        return x, z, fake, w_estimate, -pt.mean(d_fake), gap

    def _rmsprop(self, params, grads, scale=None):
        """RMSProp updates of ``params``; the critic's are clipped into the box."""
        rho = np.asarray(self.hp["rho"], dtype=self.floatX)
        eps = np.asarray(self.EPS, dtype=self.floatX)
        c = np.asarray(self.hp["clip"], dtype=self.floatX)
        accs = dict(zip(self.params, self.accumulators))
        updates = []
        for p, g in zip(params, grads):
            if scale is not None:
                g = g * scale
            r = accs[p]
            r_new = (rho * r + (1 - rho) * g ** 2).astype(self.floatX)
            p_new = p - self.lr * g / pt.sqrt(r_new + eps)
            if p in self.critic_params:
                p_new = pt.clip(p_new, -c, c)
            updates += [(r, r_new), (p, p_new.astype(self.floatX))]
        return updates

    def compile_iter_fns(self, sync_type: str | None = None) -> None:
        self.sync_type = sync_type
        x, z, fake, w_est, gen_loss, gap = self._graph()
        # lists of params in, lists of tensors out (pytensor.grad's annotation is a union for every wrt)
        g_critic = cast("list[TensorVariable]", pytensor.grad(-w_est, self.critic_params))
        g_gen = cast("list[TensorVariable]", pytensor.grad(gen_loss, self.gen_params))
        inputs = [x, z]
        if sync_type == "cdd":
            n_gen = sum(self.sizes) - self.n_critic_flat
            flat_c = pt.concatenate([g.ravel() for g in g_critic] + [pt.zeros((n_gen,), dtype=self.floatX)])
            flat_g = pt.concatenate([pt.zeros((self.n_critic_flat,), dtype=self.floatX), *(g.ravel() for g in g_gen)])
            for phase, flat in (("critic", flat_c), ("gen", flat_g)):
                outputs = [pytensor.Out(flat.astype(self.floatX), borrow=True), w_est, gap]
                self._fns[f"{phase}_grad"] = pytensor.function(inputs, outputs)
            vector = pt.vector("update", dtype=self.floatX)
            pieces, start = [], 0
            for p, size in zip(self.params, self.sizes):
                pieces.append(vector[start:start + size].reshape(p.get_value(borrow=True).shape))
                start += size
            mean = np.asarray(1.0 / self.config.size, dtype=self.floatX)
            nc = len(self.critic_params)
            on_device = default_compute() == "jax"  # the sum goes in as a jax array, unchecked (no host copy)
            self._fns["critic_apply"] = pytensor.function(
                [vector], [], updates=self._rmsprop(self.critic_params, pieces[:nc], mean), trust_input=on_device)
            self._fns["gen_apply"] = pytensor.function(
                [vector], [], updates=self._rmsprop(self.gen_params, pieces[nc:], mean), trust_input=on_device)
        else:
            self._fns["critic_step"] = pytensor.function(inputs, [w_est, gap],
                                                         updates=self._rmsprop(self.critic_params, g_critic))
            self._fns["gen_step"] = pytensor.function(inputs, [w_est, gap],
                                                      updates=self._rmsprop(self.gen_params, g_gen))
        self._fns["val"] = pytensor.function(inputs, [w_est, gap])
        self._fns["sample"] = pytensor.function([z], fake)

    # ----- contract -----------------------------------------------------------------------
    def phase(self, count: int) -> str:
        """'critic' or 'gen' for training batch ``count`` of the current epoch (the same on every worker)."""
        step = self._epoch * self.data.n_batch_train + count
        return "gen" if step % (self.hp["n_critic"] + 1) == self.hp["n_critic"] else "critic"

    def noise(self, n: int, *key: int) -> np.ndarray:
        rng = np.random.default_rng([self.config.seed, self.config.rank, *key])
        return rng.standard_normal((n, self.hp["z_dim"]), dtype=np.float32).astype(self.floatX)

    def train_iter(self, count: int, recorder):
        with recorder.timer("wait"):
            xb, _ = self.data.train_batch(count)
        z = self.noise(len(xb), self._epoch, count)
        self._phase = self.phase(count)
        if self.sync_type == "cdd":
            vector, w_est, gap = self._fns[f"{self._phase}_grad"](xb, z)
            recorder.record_train(w_est, gap, len(xb))
            return vector
        w_est, gap = self._fns[f"{self._phase}_step"](xb, z)
        recorder.record_train(w_est, gap, len(xb))
        return None

    def apply_update(self, vector_sum: np.ndarray) -> None:
        """Apply the workers' summed update vector (divided by N inside) with the phase's RMSProp."""
        fn = self._fns[f"{self._phase}_apply"]
        fn(arrays.to_jax(vector_sum, dtype=self.floatX) if fn.trust_input else vector_sum)

    def val_iter(self, count: int, recorder) -> None:
        with recorder.timer("wait"):
            xb, _ = self.data.val_batch(count)
        w_est, gap = self._fns["val"](xb, self.noise(len(xb), 10 ** 6, count))
        recorder.record_val(w_est, gap, len(xb))

    def adjust_hyperp(self, epoch: int) -> None:
        self._epoch = epoch
        self.data.set_epoch(epoch)

    def cleanup(self) -> None:
        self.data.close()

    # ----- inspection -----------------------------------------------------------------------
    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` generated images (flat, 64 pixels in [0, 1]) from z seeded by ``seed``."""
        z = np.random.default_rng([seed, 12345]).standard_normal((n, self.hp["z_dim"])).astype(self.floatX)
        if "sample" not in self._fns:
            self._fns["sample"] = pytensor.function([self.gen_in.input_var], L.get_output(self.generator))
        return self._fns["sample"](z)

    def pixel_mean_gap(self, n: int = 1000, seed: int = 0) -> float:
        """Mean over pixels of |training images' mean - ``n`` generated images' mean| (0 = mean image matched)."""
        return float(np.mean(np.abs(self.data_mean - self.sample(n, seed).mean(axis=0))))
