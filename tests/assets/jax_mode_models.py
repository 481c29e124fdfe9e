"""Models that compile their own functions, for JAX-mode sessions (tests/sessions/test_jax_session.py, and
tests/sessions/test_gpu.py on a GPU).

* ``GuardedDigitsMLP``: Theano-MPI's idiom (theanompi_idiom_models.DigitsMLP: layers by hand, lib.opt, 2
  sub-batches of a shared file batch);
* ``DigitsLasagneCNN``: the same loop with a network of Lasagne layers (``import lasagne``): conv, max-pool,
  dense, on the digits as 1x8x8 images.

In JAX mode both run every compiled step under ``jax.transfer_guard("disallow")`` -- parameters, momenta,
the learning rate, the exchanged vels and the file batch must already be on the device, or the step fails
-- with the sub-batch index put on the device once (``trust_input``: pytensor would take a Python int to
the host and back). At cleanup each writes ``RUN_DIR/jax-report-RANK-PID.json`` (an EASGD server builds the
model too): its shared variables' classes, their storages' types and platforms, and how many steps ran guarded.
"""

import json
import os
import sys

import lasagne
import numpy as np
import pytensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the idiom model this file builds on
from theanompi_idiom_models import DigitsMLP


class GuardedSteps:
    """Mixin: in JAX mode, the compiled training step runs under ``jax.transfer_guard("disallow")``."""

    guarded_steps = 0

    def compile_iter_fns(self, *args, **kwargs):
        super().compile_iter_fns(*args, **kwargs)
        self.jax_mode = "jax" in type(self.params[0].get_value(borrow=True)).__module__
        if not self.jax_mode:
            return
        import jax

        indices = [jax.device_put(np.int32(i)) for i in range(self.n_subb)]
        self.get_vel.trust_input = True  # a device scalar goes in as it is
        step = self.train_iter_fn

        def guarded_step(subb):
            with jax.transfer_guard("disallow"):
                out = step(indices[subb])
            self.guarded_steps += 1
            return out

        self.train_iter_fn = guarded_step

    def cleanup(self):
        storages = [p.get_value(borrow=True) for p in self.params + [self.shared_lr, self.shared_x]]
        report = {
            "classes": sorted({type(p).__name__ for p in self.params + [self.shared_lr, self.shared_x]}),
            "storage_types": sorted({type(s).__name__ for s in storages}),
            "storage_platforms": sorted({d.platform for s in storages if hasattr(s, "devices") for d in s.devices()}),
            "guarded_steps": self.guarded_steps,
        }
        if self.run_dir is not None:
            (self.run_dir / f"jax-report-{self.rank}-{os.getpid()}.json").write_text(json.dumps(report))
        super().cleanup()


class GuardedDigitsMLP(GuardedSteps, DigitsMLP):
    pass


class DigitsLasagneCNN(GuardedSteps, DigitsMLP):
    """DigitsMLP's loop (file batches, sub-batches, lib.opt) around a network of Lasagne layers."""

    def build_model(self):
        import pytensor.tensor as T

        from theanompi.models.layers2 import extract_weight_types

        lasagne.random.set_rng(np.random.RandomState(1234))
        self.x = T.fmatrix('x')
        self.y = T.lvector('y')
        self.lr = T.scalar('lr', dtype='float32')
        net = lasagne.layers.InputLayer((None, 1, 8, 8), input_var=self.x.reshape((-1, 1, 8, 8)))
        net = lasagne.layers.Conv2DLayer(net, 8, 3, pad=1)
        net = lasagne.layers.MaxPool2DLayer(net, 2)
        net = lasagne.layers.DenseLayer(net, 32)
        net = lasagne.layers.DenseLayer(net, 10, nonlinearity=lasagne.nonlinearities.softmax)
        p_y = lasagne.layers.get_output(net)
        self.params = lasagne.layers.get_all_params(net, trainable=True)
        self.weight_types = extract_weight_types(self.params)
        self.cost = lasagne.objectives.categorical_crossentropy(p_y, self.y).mean()
        self.error = 1 - lasagne.objectives.categorical_accuracy(p_y, self.y).mean()
        self.error_top_5 = 1 - lasagne.objectives.categorical_accuracy(p_y, self.y, top_k=5).mean()
        assert all(isinstance(p, pytensor.compile.SharedVariable) for p in self.params)
