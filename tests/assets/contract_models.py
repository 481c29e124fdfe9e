"""ModelClasses that break the contract in one way each (used by tests through MODELFILE=path.py)."""

from theanompi.models.mlp import MLP


class NoValIter:
    def compile_iter_fns(self, sync_type): ...
    def train_iter(self, count, recorder): ...
    def adjust_hyperp(self, epoch): ...
    def cleanup(self): ...


class NoParams(MLP):
    def __init__(self, config):
        super().__init__(config)
        self.params = []


class NoApplyUpdate(MLP):
    apply_update = None


class RaisesMidEpoch(MLP):
    """Rank 1 raises on its 4th training batch of the 2nd epoch."""

    def train_iter(self, count, recorder):
        if self.config.rank == 1 and self._epoch == 1 and count == 3:
            raise RuntimeError("injected failure at iteration 3")
        return super().train_iter(count, recorder)


class UnequalShards(MLP):
    """Rank 1 has one more training batch than rank 0 (ranks must disagree before exchanging)."""

    def __init__(self, config):
        super().__init__(config)
        self.data.n_batch_train += config.rank


class Sleeper(MLP):
    """Trains very slowly, so a test can interrupt it."""

    def train_iter(self, count, recorder):
        import time

        time.sleep(0.5)
        return super().train_iter(count, recorder)


class NaNInjector(MLP):
    """Worker 1 poisons its state at its first step (the only step an EASGD worker is sure to be
    granted: a faster worker may train all the others): the cdd update vector's last element
    becomes Inf; in every other mode parameter W1 becomes NaN."""

    def train_iter(self, count, recorder):
        import numpy as np

        vector = super().train_iter(count, recorder)
        self._steps_done = getattr(self, "_steps_done", 0) + 1
        if self.config.rank == 1 and self._steps_done == 1:
            if vector is not None:
                vector[-1] = np.inf
            else:
                W1 = self.params[2]
                W1.set_value(W1.get_value() * np.float32("nan"))
        return vector


class RankDependentShape(MLP):
    """Worker k has a hidden layer of 32 + k units: the ranks disagree on parameter shapes."""

    def __init__(self, config):
        config.model_options["hidden"] = 32 + config.rank
        super().__init__(config)


class Napper(MLP):
    """A 0.1 s nap per step: slow enough to kill a worker mid-run, fast enough to finish after."""

    def train_iter(self, count, recorder):
        import time

        time.sleep(0.1)
        return super().train_iter(count, recorder)


class DiesMidRun(Napper):
    """The worker built with ``config.rank == die_rank`` (its index among the workers: EASGD's server is not
    counted) kills itself (SIGKILL: no word to anyone) at its ``die_at``-th training step: a worker lost mid-run
    whatever the machine's speed."""

    defaults = {**Napper.defaults, "die_rank": 1, "die_at": 6}

    def __init__(self, config):
        super().__init__(config)
        self._steps = 0

    def train_iter(self, count, recorder):
        self._steps += 1
        if self.config.rank == self.hp["die_rank"] and self._steps == self.hp["die_at"]:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return super().train_iter(count, recorder)


class HangsWhere(MLP):
    """The rank built with ``config.rank == hang_rank`` stops doing anything in phase ``hang_in``:
    'build' (its constructor), 'train' (its first step: under EASGD a fast worker may take every later
    step from a slow one) or 'val' (its 2nd validation batch; EASGD's server, built as rank 0, validates
    and warms up with one batch while it builds)."""

    defaults = {**MLP.defaults, "hang_in": "train", "hang_rank": 1}

    def _hang_if(self, phase):
        if self.hp["hang_in"] == phase and self.config.rank == self.hp["hang_rank"]:
            import time

            time.sleep(3600)

    def __init__(self, config):
        super().__init__(config)
        self._val_calls = 0
        self._train_calls = 0
        self._hang_if("build")

    def train_iter(self, count, recorder):
        self._train_calls += 1
        if self._train_calls == 1:
            self._hang_if("train")
        return super().train_iter(count, recorder)

    def val_iter(self, count, recorder):
        self._val_calls += 1
        if self._val_calls == 2:
            self._hang_if("val")
        return super().val_iter(count, recorder)
