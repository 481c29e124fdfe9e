"""AVERAGE_WEIGHTS=ema's arithmetic against NumPy references over the same parameter sequences: the average itself
(with its decay's warm-up and EMA_START_EPOCH), GOSGD's averages gossiped with the params (their weighted sum is the
consensus's average), a parameter-server shard's average and scheduled learning rate."""

import numpy as np
import pytest

from theanompi.comm.params_ema import WARMUP, ParamsEMA
from theanompi.comm.ps.shard import TableShard
from theanompi.rules.gosgd import merge


def reference_ema(sequence, batches, epochs, decay, start_epoch):
    """The average of ``sequence`` (the model after each update), written out as the docs define it."""
    average, seen = np.array(sequence[0], dtype=np.float64), 0
    for x, k, epoch in zip(sequence[1:], batches[1:], epochs[1:]):
        if epoch < start_epoch:
            average = np.array(x, dtype=np.float64)
            continue
        d = min(decay, (1 + seen) / (WARMUP + seen)) ** k
        seen += k
        average = d * average + (1 - d) * np.asarray(x, dtype=np.float64)
    return average


@pytest.mark.parametrize("start_epoch", [0, 2])
def test_the_average_equals_its_reference(start_epoch):
    rng = np.random.default_rng(0)
    sequence = [rng.standard_normal(7).astype("float32") for _ in range(200)]
    batches = [int(k) for k in rng.integers(1, 5, 200)]
    epochs = [i // 40 for i in range(200)]
    ema = ParamsEMA(decay=0.97, start_epoch=start_epoch)
    for x, k, epoch in zip(sequence, batches, epochs):
        ema.update(x, k, epoch)
    np.testing.assert_allclose(ema.values, reference_ema(sequence, batches, epochs, 0.97, start_epoch), rtol=1e-12)
    assert ema.seen == sum(k for k, e in zip(batches[1:], epochs[1:]) if e >= start_epoch)


def test_the_decay_warms_up_then_holds():
    ema = ParamsEMA(decay=0.99, start_epoch=0)
    decays = [ema.next_decay(1, 0) for _ in range(2000)]
    assert decays[0] == pytest.approx(0.1) and decays[8] == pytest.approx(9 / 18)
    assert max(decays) == pytest.approx(0.99) and decays[-1] == pytest.approx(0.99)


def test_gossiped_averages_are_the_consensus_average():
    """Each worker folds its params into its average (decay d**N per local step) and gossips [x | average] with
    half its weight; the receiver merges both with the same coefficient. The weighted sum of the averages is then
    the average of the weighted consensus, step by step."""
    rng = np.random.default_rng(3)
    n, size, d = 3, 5, 0.9
    weights = np.full(n, 1.0 / n)
    states = [np.concatenate([x, x]) for x in [rng.standard_normal(size)] * n]  # a common start
    consensus_average = states[0][:size].copy()
    for _ in range(60):
        for i in range(n):  # a local step, then the average, with the decay of N workers' batches
            states[i][:size] += 0.1 * rng.standard_normal(size)
            states[i][size:] = d ** n * states[i][size:] + (1 - d ** n) * states[i][:size]
        consensus = sum(w * s[:size] for w, s in zip(weights, states))
        consensus_average = d ** n * consensus_average + (1 - d ** n) * consensus
        for i in range(n):  # gossip, delivered at once
            if rng.random() < 0.4:
                j = int((i + 1 + rng.integers(n - 1)) % n)
                weights[i] *= 0.5
                weights[j] = merge(states[j], weights[j], states[i].copy(), weights[i])
    assert weights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(sum(w * s[size:] for w, s in zip(weights, states)), consensus_average, rtol=1e-10)


def test_a_shard_keeps_the_average_of_its_values_and_steps_at_the_scheduled_rate():
    shard = TableShard.create(0, num_row=6, num_col=1, dtype="float64", start=2, stop=6, updater="sgd", lr=0.5)
    rng = np.random.default_rng(1)
    shard.set(None, rng.standard_normal((4, 1)))
    shard.set_average(None, shard.values)
    values, average = shard.values.copy(), shard.values.copy()
    for i in range(20):
        push, lr, decay = rng.standard_normal((4, 1)), 0.1 / (1 + i), 0.8
        shard.add(client=1, rows=None, push=push, base_version=shard.version, lr=lr, decay=decay)
        values = values - lr * push
        average = decay * average + (1 - decay) * values
    np.testing.assert_allclose(shard.values, values, rtol=1e-12)
    np.testing.assert_allclose(shard.pulled_average(None), average, rtol=1e-12)
    shard.add(client=1, rows=None, push=np.ones((4, 1)), base_version=shard.version)  # the table's own rate
    np.testing.assert_allclose(shard.values, values - 0.5, rtol=1e-12)
    np.testing.assert_allclose(shard.pulled_average(np.array([1, 3])), average[[1, 3]], rtol=1e-12)
