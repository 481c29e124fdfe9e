"""BSP avg's outer optimizer (DiLoCo, BSP_OUTER_OPTIMIZER=nesterov) under a real mpiexec: its step against a
NumPy replay, lr 1 and momentum 0 against plain averaging, its state through a checkpoint, and the three kinds of
models. (The optimizer alone: tests/rules/test_outer_optimizer.py.)"""

import json

import numpy as np
import pytest
from conftest import ASSETS, ROOT, run_launcher, run_mpi, write_cfg

from theanompi.runtime.records import load_final_params
from theanompi.session.checkpoint import load_checkpoint

MLP = dict(MODEL_HIDDEN=32, BSP_SYNC_TYPE="avg", BSP_AVG_FREQ=3)


def session(tmp_path, name, **keys):
    proc, _ = run_launcher(f"-cfg={write_cfg(tmp_path / f'{name}.cfg', RUN_DIR=name, **keys)}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / name / "summary.json").read_text()), proc.stdout


def test_two_outer_steps_equal_the_numpy_replay():
    assert "bsp outer step ok: 2 outer steps of 3 local steps" in run_mpi("check_bsp_diloco.py", 2, "3").stdout


@pytest.mark.parametrize("extra", [{}, {"AVERAGE_WEIGHTS": "ema", "EMA_DECAY": 0.9}], ids=["params", "ema"])
def test_nesterov_with_lr_1_and_momentum_0_is_plain_averaging(tmp_path, extra):
    """theta_outer - mean(theta_outer - theta_i) == mean(theta_i): 2 epochs of 3-step rounds, epoch ends included,
    end within float32 rounding of today's parameter averaging (and far from where they started); with
    AVERAGE_WEIGHTS=ema the final model is the average of the common params after each exchange, in both."""
    plain, _ = session(tmp_path, "plain", **MLP, **extra)
    outer, out = session(tmp_path, "outer", BSP_OUTER_OPTIMIZER="nesterov", BSP_OUTER_LR=1, BSP_OUTER_MOMENTUM=0,
                         **MLP, **extra)
    assert "BSP outer optimizer nesterov (DiLoCo: lr 1, momentum 0, every 3 local steps" in out.splitlines()[0]
    assert (plain["outer_optimizer"], outer["outer_optimizer"]) == ("none", "nesterov")
    first = np.concatenate([p.ravel() for p in load_final_params(tmp_path / "plain")])
    second = np.concatenate([p.ravel() for p in load_final_params(tmp_path / "outer")])
    np.testing.assert_allclose(second, first, rtol=1e-4, atol=1e-5)
    if extra:
        assert plain.get("final_model") == outer.get("final_model") == "ema"
    assert plain["bytes_sent"] == outer["bytes_sent"] and min(plain["bytes_sent"]) > 0


def test_diloco_with_powersgd_resumes_exactly(tmp_path):
    """theta_outer, its momentum, PowerSGD's Q and each worker's errors go into the checkpoint and come back: a
    session resumed after epoch 1 of 2 ends bit for bit where the uninterrupted one did."""
    common = dict(MLP, BSP_AVG_FREQ=5, BSP_OUTER_OPTIMIZER="nesterov", BSP_COMPRESSION="powersgd",
                  CHECKPOINT_EVERY=1, N_EPOCHS=2)
    full, _ = session(tmp_path, "full", **common)
    rest, out = session(tmp_path, "rest", RESUME="full/checkpoints/ckpt-epoch-0000.hkl", **common)
    assert "resumed from" in out and full["iterations"] == rest["iterations"]
    for a, b in zip(load_final_params(tmp_path / "full"), load_final_params(tmp_path / "rest")):
        np.testing.assert_array_equal(a, b)
    states = load_checkpoint(tmp_path / "full/checkpoints/ckpt-epoch-0000.hkl")["worker_rule_state"]
    # the local steps since the last exchange: what the averaged weights' next update folds in (AVERAGE_WEIGHTS=ema)
    assert sorted(states[0]) == ["outer_momentum", "outer_params", "powersgd_error", "powersgd_q",
                                 "steps_since_average"]
    assert sorted(states[1]) == ["powersgd_error", "powersgd_q", "steps_since_average"]  # theta_outer: worker 0's
    assert np.abs(states[0]["powersgd_error"] - states[1]["powersgd_error"]).max() > 0  # errors are per worker


@pytest.mark.parametrize("kind", ["torch", "theanompi-style"])
def test_diloco_with_a_compressed_pseudo_gradient_learns(tmp_path, kind):
    """One outer step per epoch (BSP_AVG_FREQ beyond the epoch: the epoch's end is the exchange), pseudo-gradients
    in bf16 (a PyTorch model) or fp16 (a Theano-MPI-style model)."""
    if kind == "torch":
        pytest.importorskip("torch")
        keys = dict(MODELFILE=str(ROOT / "examples" / "torch_digits.py"), MODELCLASS="DigitsCNN", MODEL_BATCH_SIZE=16,
                    MODEL_LR=0.05, N_EPOCHS=3, BSP_COMPRESSION="bf16")
    else:
        keys = dict(MODELFILE=str(ASSETS / "theanompi_idiom_models.py"), MODELCLASS="DigitsMLP", N_EPOCHS=None,
                    BSP_COMPRESSION="fp16")
    result, out = session(tmp_path, "run", BSP_SYNC_TYPE="avg", BSP_AVG_FREQ=1000, BSP_OUTER_OPTIMIZER="nesterov",
                          **keys)
    assert (result["outer_optimizer"], result["compression"]) == ("nesterov", keys["BSP_COMPRESSION"])
    assert result["final_val_accuracy"] >= 0.9, result["final_val_accuracy"]


def test_powersgd_state_starts_afresh_at_another_number_of_workers(tmp_path):
    """A checkpoint of 2 workers resumed by 3 (a manual RESUME, or an elastic restart that grows): the workers start
    from the consensus and PowerSGD's errors and Q start afresh (one line says so); the session finishes, and its
    next checkpoint holds the state of 3 workers."""
    common = dict(MLP, BSP_SYNC_TYPE="cdd", BSP_AVG_FREQ=None, BSP_COMPRESSION="powersgd", CHECKPOINT_EVERY=1,
                  N_EPOCHS=2)
    session(tmp_path, "two", **common)
    cfg = write_cfg(tmp_path / "three.cfg", RUN_DIR="three", DEVICES="cpu0,cpu1,cpu2",
                    RESUME="two/checkpoints/ckpt-epoch-0000.hkl", **common)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "a checkpoint of 2 workers resumed with 3: the powersgd state starts afresh" in proc.stdout + proc.stderr
    states = load_checkpoint(tmp_path / "three/checkpoints/ckpt-epoch-0001.hkl")["worker_rule_state"]
    assert len(states) == 3 and all(sorted(s) == ["powersgd_error", "powersgd_q"] for s in states)


def epochs(run_dir):
    return [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]


def test_without_epoch_end_averages_the_workers_exchange_every_h_steps_and_after_the_last_epoch(tmp_path):
    """BSP_AVG_AT_EPOCH_END=false, BSP_AVG_FREQ beyond the session's steps: the only exchange is the one after the
    last epoch (worker 1 sends a third of what the epoch-end averages send in 3 epochs), and the epochs before it
    are validated on theta_outer -- the starting model, the same accuracy twice -- not on the workers' own models,
    which trained on; the last epoch on the workers' average, which learned."""
    keys = dict(MLP, BSP_AVG_FREQ=1000, N_EPOCHS=3)
    every, _ = session(tmp_path, "every", **keys)
    last, out = session(tmp_path, "last", BSP_AVG_AT_EPOCH_END="false", **keys)
    assert "BSP avg every 1000 local steps and after the last epoch" in out
    sent = [r["per_worker"][1]["bytes_sent"] for r in (every, last)]  # worker 1 sends no starting broadcast
    assert sent[1] > 0 and sent[0] == 3 * sent[1], sent
    accuracy = [e["val_accuracy"] for e in epochs(tmp_path / "last")]
    assert accuracy[0] == accuracy[1] < 0.5, accuracy  # theta_outer: the untrained start
    assert accuracy[2] >= 0.85, accuracy
    assert epochs(tmp_path / "every")[0]["val_accuracy"] > accuracy[0] + 0.3  # with them: an average each epoch


def test_without_epoch_end_averages_a_resume_continues_each_workers_local_steps(tmp_path):
    """Each worker's own params (not theta_outer, which the epoch was validated on) go into the checkpoint with
    theta_outer and its momentum: resumed after epoch 1 of 2, with outer steps every 5 local steps that straddle
    the epoch's end, the session ends bit for bit where the uninterrupted one did; so does its final model, the
    default averaged weights, whose next update folds in the local steps since the last exchange (checkpointed)."""
    common = dict(MLP, BSP_AVG_FREQ=5, BSP_OUTER_OPTIMIZER="nesterov", BSP_AVG_AT_EPOCH_END="false",
                  CHECKPOINT_EVERY=1, N_EPOCHS=2)
    full, _ = session(tmp_path, "full", **common)
    rest, out = session(tmp_path, "rest", RESUME="full/checkpoints/ckpt-epoch-0000.hkl", **common)
    assert "resumed from" in out and full["iterations"] == rest["iterations"]
    assert full["iterations"] % 5, "the session must end between two outer steps (its last exchange: the end's)"
    for a, b in zip(load_final_params(tmp_path / "full"), load_final_params(tmp_path / "rest")):
        np.testing.assert_array_equal(a, b)
    assert epochs(tmp_path / "full")[1]["val_accuracy"] == epochs(tmp_path / "rest")[0]["val_accuracy"]
    saved = load_checkpoint(tmp_path / "full/checkpoints/ckpt-epoch-0000.hkl")
    workers = [np.concatenate([np.ravel(p) for p in params]) for params in saved["worker_params"]]
    assert np.abs(workers[0] - workers[1]).max() > 0, "the workers' local params, not theta_outer, are saved"
