"""WGAN: a Wasserstein GAN (Arjovsky, Chintala & Bottou 2017), and LSGAN, its least-squares sibling (Mao et al. 2017).

Networks, ``arch=mlp`` (the default; ``critic_hidden`` / ``gen_hidden`` = ``"128,128"``, ``z_dim`` = 16)::

    critic     image (pixels in [0, 1], flattened) -> dense(128) + leaky relu -> dense(128) + leaky relu -> dense(1)
    generator  z ~ N(0, I_16) -> dense(128) + relu -> dense(128) + relu -> dense(pixels) + sigmoid

``arch=dcgan`` (the DCGAN pair of Radford et al. that Theano-MPI's Lasagne zoo trains; ``widths`` =
``"64,128"``, ``fc_width`` = 1024; the image side must divide by 4)::

    critic     image (C, H, W) -> conv5x5/2(64) + leaky relu -> conv5x5/2(128) + leaky relu
                               -> dense(1024) + leaky relu -> dense(1)
    generator  z -> dense(1024) + BN + relu -> dense(128 x H/4 x W/4) + BN + relu -> reshape
                 -> transposed conv5x5/2(64) + BN + relu -> transposed conv5x5/2(C) + sigmoid

The critic has no batch norm (its weights are clipped: a clipped BN scale would silence it); the
generator's batch norm normalises with each batch's statistics (samples drawn for inspection use its
running statistics).

Data (``data``): ``digits`` (scikit-learn's 8x8 digits, the default: no download), ``mnist`` or
``cifar10`` (``data_dir`` holds ``mnist.npz``/``mnist.pkl.gz`` or the CIFAR-10 python batches; without
it in the cfg the environment's ``MODEL_DATA_DIR``), all scaled to [0, 1].

Training (Algorithm 1 of the paper): RMSProp (``lr``, ``rho``), the critic's
weights clipped to ``[-clip, clip]`` after every critic step, ``n_critic`` critic
steps per generator step. The critic maximises the Wasserstein estimate
``W = mean f(x_real) - mean f(G(z))``; the generator minimises ``-mean f(G(z))``.
With ``loss=least_squares`` (LSGAN, targets a=0, b=c=1) the critic minimises
``(mean (f(x_real) - 1)^2 + mean f(G(z))^2) / 2`` and the generator ``mean (f(G(z)) - 1)^2 / 2``,
with the same RMSProp and no clipping.
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
  Wasserstein estimate ``W`` on the batch (LSGAN: the critic's least-squares loss) (validation: on the validation images
  against the same number of generated images from fixed ``z``). **error** is not
  a classification error: it is the *pixel-mean gap*, the mean over the 64
  pixels of ``|mean of the real images - mean of the generated images|`` (in
  pixel units, [0, 1]; 0 when the generator matches the data's mean image;
  sampling noise alone leaves about 0.03 for batches of 64). The progress line's
  "acc" is therefore 1 - gap, and ``final_val_accuracy`` in ``summary.json`` is
  1 - the validation gap.

Model options (cfg ``MODEL_*``): ``batch_size`` (64), ``lr`` (0.0002),
``rho`` (0.9), ``clip`` (0.1), ``n_critic`` (5), ``z_dim`` (16), ``loss``
(``wasserstein``/``least_squares``), ``arch`` (``mlp``/``dcgan``), ``critic_hidden``,
``gen_hidden`` (mlp), ``widths``, ``fc_width`` (dcgan), ``data`` (``digits``/``mnist``/``cifar10``),
``data_dir``, ``train_size``/``val_size`` (0: all images), ``n_epochs`` (30).
``LR_SCALING`` does not apply.

What it reaches (1 worker, defaults, seeds 0-3): the pixel-mean gap of 1,000
samples falls from 0.29-0.32 at initialisation to 0.10-0.11 after 15 epochs (360
steps), 0.07-0.08 after 20 and 0.066-0.083 after 30 epochs; the samples' per-pixel standard deviation
stays at about half the data's (no collapse onto the mean image). The critic's
estimate W rises while the critic learns (to about 2.5-4) and falls as the
generator catches up (about 0.5 after 30 epochs).

cfg::

    RULE=BSP
    MODELFILE=theanompi.models.zoo.gans
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
>>> ls = LSGAN(WorkerConfig(rank=0, size=1, seed=0, device="cpu0",
...                         model_options={"arch": "dcgan", "widths": "4,8", "fc_width": 16, "train_size": 128}))
>>> ls.compile_iter_fns("local"); ls.adjust_hyperp(0)
>>> ls.train_iter(0, Recorder(None)) is None, ls.sample(2).shape, ls.hp["loss"]
(True, (2, 1, 8, 8), 'least_squares')
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import clone_replace

import theanompi.nn as L
from theanompi.backend import arrays
from theanompi.backend.compute import default_compute
from theanompi.core.errors import ConfigError
from theanompi.core.options import (
    choice,
    directory_path,
    int_list,
    model_option,
    non_negative_int,
    parse_int_list,
    positive_float,
    positive_int,
    unit_interval,
)
from theanompi.models.contract import WorkerConfig
from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.cifar10 import load_cifar10
from theanompi.models.data.digits import load_digits_split
from theanompi.models.data.image_loaders import subset
from theanompi.models.data.mnist import load_mnist
from theanompi.models.hyperparams import ClassifierHyperParams
from theanompi.models.model_options import HasModelOptions

if TYPE_CHECKING:
    from pytensor.tensor.variable import TensorVariable


def load_gan_images(kind: str, data_dir: str, dtype: str):
    """((x_train, y_train), (x_val, y_val)): images ``(N, C, H, W)`` scaled to [0, 1] of the ``data`` option.

    Example
    -------
    >>> (xt, _), (xv, _) = load_gan_images("digits", "", "float32")
    >>> xt.shape, xv.shape, float(xt.max())
    ((1500, 1, 8, 8), (297, 1, 8, 8), 1.0)
    """
    if kind == "digits":
        return load_digits_split(flat=False, dtype=dtype)
    if kind == "mnist":
        (xt, yt), (xv, yv), *_ = load_mnist(data_dir)
        return (xt.reshape(-1, 1, 28, 28).astype(dtype), yt), (xv.reshape(-1, 1, 28, 28).astype(dtype), yv)
    (xt, yt), (xv, yv) = load_cifar10(data_dir)
    return (xt.astype(dtype) / np.asarray(255, dtype), yt), (xv.astype(dtype) / np.asarray(255, dtype), yv)


class WGAN(HasModelOptions):
    """Wasserstein GAN (or, with ``loss=least_squares``, LSGAN): critic + generator, RMSProp, n_critic."""

    declared_options = [
        ClassifierHyperParams.option_table["batch_size"].with_default(64),
        model_option("lr", positive_float, 0.0002, "RMSProp's learning rate"),
        model_option("rho", unit_interval, 0.9, "RMSProp's decay of the mean squared gradient"),
        model_option("clip", positive_float, 0.1, "the critic's weights are clipped to [-clip, clip] (wasserstein)"),
        model_option("n_critic", positive_int, 5, "critic steps per generator step"),
        model_option("z_dim", positive_int, 16, "dimensions of the generator's noise"),
        model_option("critic_hidden", int_list(), "128,128", "arch=mlp: units of the critic's hidden layers"),
        model_option("gen_hidden", int_list(), "128,128", "arch=mlp: units of the generator's hidden layers"),
        model_option("train_size", non_negative_int, 0, "use only the first training images (0: all)"),
        model_option("val_size", non_negative_int, 0, "use only the first validation images (0: all)"),
        ClassifierHyperParams.option_table["n_epochs"].with_default(30),
        model_option("loss", choice("wasserstein", "least_squares"), "wasserstein",
                     "wasserstein (WGAN) or least_squares (LSGAN, no clipping)"),
        model_option("arch", choice("mlp", "dcgan"), "mlp", "the networks: dense layers or DCGAN's convolutions"),
        model_option("widths", int_list(length=2), "64,128", "arch=dcgan: channels of the critic's two convolutions"),
        model_option("fc_width", positive_int, 1024, "arch=dcgan: units of the dense layer of each network"),
        model_option("data", choice("digits", "mnist", "cifar10"), "digits",
                     "the images: digits (no download), mnist or cifar10 (MODEL_DATA_DIR)"),
        model_option("data_dir", directory_path, "",
                     "directory of mnist.npz / mnist.pkl.gz or the CIFAR-10 python batches (default: the "
                     "environment's MODEL_DATA_DIR)"),
    ]

    EPS = 1e-6

    @classmethod
    def check_options(cls, hp: dict[str, Any]) -> None:
        """The data directory (checked at launch)."""
        super().check_options(hp)
        if hp["data"] != "digits":
            if not hp["data_dir"]:
                raise ConfigError(f"{cls.__name__}: data={hp['data']} needs MODEL_DATA_DIR (in the cfg or the "
                                  "environment); or use MODEL_DATA=digits")
            if not Path(hp["data_dir"]).is_dir():
                raise ConfigError(f"{cls.__name__}: MODEL_DATA_DIR={hp['data_dir']!r} is not a directory")

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.hp = self.validate_options(config.model_options)
        self.n_epochs = self.hp["n_epochs"]
        self.floatX = pytensor.config.floatX
        self.wasserstein = self.hp["loss"] == "wasserstein"
        (xt, yt), (xv, yv) = load_gan_images(self.hp["data"], self.hp["data_dir"], self.floatX)
        self.image_shape = tuple(xt.shape[1:])
        if self.hp["arch"] == "mlp":
            xt, xv = xt.reshape(len(xt), -1), xv.reshape(len(xv), -1)
        elif self.image_shape[1] % 4 or self.image_shape[2] % 4:
            raise ConfigError(f"{type(self).__name__}: arch=dcgan needs image sides divisible by 4; "
                              f"{self.hp['data']} has {self.image_shape[1]}x{self.image_shape[2]}")
        x_train, y_train = subset(xt, yt, self.hp["train_size"])
        x_val, y_val = subset(xv, yv, self.hp["val_size"])
        self.data = ShardedArrayData(x_train, y_train, x_val, y_val, self.hp["batch_size"], config.rank, config.size,
                                     config.seed)
        self.n_pixels = int(np.prod(self.image_shape))
        self.data_mean = x_train.mean(axis=0)
        L.init.set_rng(np.random.default_rng(config.seed))  # identical networks on every rank
        if self.hp["arch"] == "mlp":
            self.critic_in, self.critic = self._mlp_critic()
            self.gen_in, self.generator = self._mlp_generator()
        else:
            self.critic_in, self.critic = self._dcgan_critic()
            self.gen_in, self.generator = self._dcgan_generator()
        self.critic_params = L.get_all_params(self.critic, trainable=True)
        if self.wasserstein:
            clip = self.hp["clip"]
            for p in self.critic_params:  # start inside the box
                p.set_value(np.clip(p.get_value(), -clip, clip))
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

    # ----- networks -----------------------------------------------------------------------
    def _mlp_critic(self) -> tuple[L.InputLayer, L.Layer]:
        l_in = L.InputLayer((None, self.n_pixels), name="critic_in")
        net: L.Layer = l_in
        leaky = L.nonlinearities.LeakyRectify(0.2)
        for i, h in enumerate(parse_int_list(self.hp["critic_hidden"]), start=1):
            net = L.DenseLayer(net, h, nonlinearity=leaky, W=L.init.HeNormal("relu"), name=f"critic{i}")
        return l_in, L.DenseLayer(net, 1, nonlinearity=None, name="critic_out")

    def _mlp_generator(self) -> tuple[L.InputLayer, L.Layer]:
        l_in = L.InputLayer((None, self.hp["z_dim"]), name="z")
        net: L.Layer = l_in
        for i, h in enumerate(parse_int_list(self.hp["gen_hidden"]), start=1):
            net = L.DenseLayer(net, h, W=L.init.HeNormal("relu"), name=f"gen{i}")
        return l_in, L.DenseLayer(net, self.n_pixels, nonlinearity=L.nonlinearities.sigmoid, name="gen_out")

    def _dcgan_critic(self) -> tuple[L.InputLayer, L.Layer]:
        leaky = L.nonlinearities.LeakyRectify(0.2)
        c1, c2 = parse_int_list(self.hp["widths"])
        l_in = L.InputLayer((None, *self.image_shape), name="critic_in")
        net: L.Layer = L.Conv2DLayer(l_in, c1, 5, stride=2, pad=2, nonlinearity=leaky, W=L.init.HeNormal("relu"),
                            name="critic_conv1")
        net = L.Conv2DLayer(net, c2, 5, stride=2, pad=2, nonlinearity=leaky, W=L.init.HeNormal("relu"),
                            name="critic_conv2")
        net = L.DenseLayer(net, self.hp["fc_width"], nonlinearity=leaky, W=L.init.HeNormal("relu"), name="critic_fc")
        return l_in, L.DenseLayer(net, 1, nonlinearity=None, name="critic_out")

    def _dcgan_generator(self) -> tuple[L.InputLayer, L.Layer]:
        c1, c2 = parse_int_list(self.hp["widths"])
        channels, height, width = self.image_shape
        l_in = L.InputLayer((None, self.hp["z_dim"]), name="z")
        net = L.batch_norm(L.DenseLayer(l_in, self.hp["fc_width"], W=L.init.HeNormal("relu"), name="gen_fc"))
        net = L.batch_norm(L.DenseLayer(net, c2 * (height // 4) * (width // 4), W=L.init.HeNormal("relu"),
                                        name="gen_project"))
        net = L.ReshapeLayer(net, ([0], c2, height // 4, width // 4), name="gen_reshape")
        net = L.batch_norm(L.TransposedConv2DLayer(net, c1, 5, stride=2, crop="same",
                                                   output_size=(height // 2, width // 2), name="gen_deconv1"))
        return l_in, L.TransposedConv2DLayer(net, channels, 5, stride=2, crop="same", output_size=(height, width),
                                             nonlinearity=L.nonlinearities.sigmoid, name="gen_out")

    # ----- graph ------------------------------------------------------------------------
    def _graph(self):
        """(x, z, fake, reported loss, critic loss, generator loss, pixel-mean gap)."""
        x = pt.tensor("x", dtype=self.floatX, shape=(None,) + tuple(self.data.x_train.shape[1:]))
        z = pt.matrix("z", dtype=self.floatX)
        fake = L.get_output(self.generator, z)
        critic_out = [L.get_output(self.critic, {self.critic_in: v}) for v in (x, fake)]
        if self.wasserstein:
            c = np.asarray(self.hp["clip"], dtype=self.floatX)
            box = {p: pt.clip(p, -c, c) for p in self.critic_params}
            critic_out = [clone_replace(out, replace=box) for out in critic_out]
        d_real, d_fake = critic_out
        gap = pt.mean(pt.abs(pt.mean(x, axis=0) - pt.mean(fake, axis=0)))
        if self.wasserstein:
            w_estimate = pt.mean(d_real) - pt.mean(d_fake)
            return x, z, fake, w_estimate, -w_estimate, -pt.mean(d_fake), gap
        half = np.asarray(0.5, dtype=self.floatX)
        critic_loss = half * (pt.mean(pt.sqr(d_real - 1)) + pt.mean(pt.sqr(d_fake)))
        return x, z, fake, critic_loss, critic_loss, half * pt.mean(pt.sqr(d_fake - 1)), gap

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
            if self.wasserstein and p in self.critic_params:
                p_new = pt.clip(p_new, -c, c)
            updates += [(r, r_new), (p, p_new.astype(self.floatX))]
        return updates

    def compile_iter_fns(self, sync_type: str | None = None) -> None:
        self.sync_type = sync_type
        x, z, fake, w_est, critic_loss, gen_loss, gap = self._graph()
        # lists of params in, lists of tensors out (pytensor.grad's annotation is a union for every wrt)
        g_critic = cast("list[TensorVariable]", pytensor.grad(critic_loss, self.critic_params))
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
        """``n`` generated images (pixels in [0, 1]; flat for ``arch=mlp``) from z seeded by ``seed``
        (the generator's batch norm on its running statistics)."""
        z = np.random.default_rng([seed, 12345]).standard_normal((n, self.hp["z_dim"])).astype(self.floatX)
        if "inspect" not in self._fns:
            out = L.get_output(self.generator, deterministic=True)
            self._fns["inspect"] = pytensor.function([self.gen_in.input_var], out)
        return self._fns["inspect"](z)

    def pixel_mean_gap(self, n: int = 1000, seed: int = 0) -> float:
        """Mean over pixels of |training images' mean - ``n`` generated images' mean| (0 = mean image matched)."""
        return float(np.mean(np.abs(self.data_mean - self.sample(n, seed).mean(axis=0))))


class LSGAN(WGAN):
    """Least-squares GAN (Mao et al. 2017): :class:`WGAN`'s networks and loop with ``loss=least_squares``."""

    defaults = {"loss": "least_squares", "lr": 0.0001}
