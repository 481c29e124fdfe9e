"""Issue 38 under a real mpiexec: the learning-rate schedule and averaged weights in sessions of every kind of rule
and model; ASGD's options for many workers together. (Resume with both: tests/sessions/test_resume.py.)"""

import json

import numpy as np
import pytest
from conftest import ASSETS, ROOT, run_launcher, write_cfg

from theanompi.runtime.records import load_final_params


def epochs_of(run_dir):
    return [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]


def test_averaged_weights_equal_numpy_over_the_trained_sequence_and_are_the_final_model(tmp_path):
    """BSP cdd, 2 workers: the average of the common parameters after every step (EMA_START_EPOCH=1: the model
    itself during epoch 0), replayed in NumPy from the parameters the model went through, is the final model."""
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=str(ASSETS / "averaged_models.py"), MODELCLASS="TracedMLP",
                    MODEL_HIDDEN=16, N_EPOCHS=2, RUN_DIR="run", AVERAGE_WEIGHTS="ema", EMA_DECAY=0.9,
                    EMA_START_EPOCH=1, LR_SCHEDULE="step", LR_DECAY_EPOCHS=1, LR_DECAY=0.1)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    trace = np.load(tmp_path / "run" / "trace-rank0.npz")
    steps, validated = trace["steps"], trace["validated"]  # validated: [own, averaged] per epoch
    trained = list(steps[1:]) + [validated[-2]]  # the parameters after each step
    per_epoch = len(steps) // 2
    average, seen = steps[0].astype(np.float64), 0
    for t, params in enumerate(trained):
        if t < per_epoch:  # epoch 0, before EMA_START_EPOCH
            average = params.astype(np.float64)
            continue
        d = min(0.9, (1 + seen) / (10 + seen)) ** 2  # one step of 2 workers' batches
        seen += 2
        average = d * average + (1 - d) * params.astype(np.float64)
    final = np.concatenate([p.ravel() for p in load_final_params(tmp_path / "run")])
    np.testing.assert_allclose(final, average, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(validated[-1], average, rtol=1e-5, atol=1e-7)  # the averaged weights validated
    np.testing.assert_array_equal(validated[0], validated[1])  # epoch 0: the average is the model
    records = epochs_of(tmp_path / "run")
    assert [r["lr"] for r in records] == pytest.approx([0.05, 0.005])  # the step schedule, on the model
    assert all(r["ema_val_accuracy"] > 0.5 for r in records)
    assert "(ema " in proc.stdout and "averaged weights, the final model" in proc.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_model"] == "ema" and summary["final_ema_val_accuracy"] == records[-1]["ema_val_accuracy"]


def test_asgd_with_every_option_for_many_workers_learns(tmp_path):
    """The server-side momentum updater on the cosine schedule after a 1-epoch warm-up, bounded staleness, the
    implicit-momentum correction and the table's average kept by the servers, together."""
    cfg = write_cfg(tmp_path / "s.cfg", RULE="ASGD", MODEL_HIDDEN=32, N_EPOCHS=3, RUN_DIR="run", WARMUP_EPOCHS=1,
                    ASGD_UPDATER="momentum", ASGD_LR=0.05, LR_SCHEDULE="cosine", ASGD_MAX_STALENESS=1,
                    ASGD_MOMENTUM_CORRECTION="implicit", AVERAGE_WEIGHTS="ema", EMA_DECAY=0.99)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_val_accuracy"] >= 0.85 and summary["final_ema_val_accuracy"] >= 0.85
    assert "ASGD_MOMENTUM_CORRECTION=implicit: the servers' momentum 0.9 -> 0.8 for 2" in proc.stdout


def test_a_model_with_its_own_schedule_keeps_it_and_one_line_says_so(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=str(ASSETS / "averaged_models.py"), MODELCLASS="OwnDecayMLP",
                    DEVICES="cpu0", MODEL_HIDDEN=16, N_EPOCHS=2, RUN_DIR="run", LR_SCHEDULE="cosine")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stdout.splitlines() if "is off for ModelClass" in line]
    assert said == ["[rank 0] LR_SCHEDULE=cosine is off for ModelClass 'OwnDecayMLP': it schedules its own learning "
                    "rate (OwnDecayMLP.lr_multiplier)"]
    assert [r["lr"] for r in epochs_of(tmp_path / "run")] == pytest.approx([0.05, 0.005])  # its own drop


def test_torch_model_under_easgd_with_schedule_and_the_centres_average(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", RULE="EASGD", DEVICES="cpu0,cpu1,cpu2", MODEL_BATCH_SIZE=16,
                    MODELFILE=str(ROOT / "examples" / "torch_digits.py"), MODELCLASS="DigitsCNN", N_EPOCHS=2,
                    RUN_DIR="run", LR_SCHEDULE="cosine", AVERAGE_WEIGHTS="ema", EMA_DECAY=0.99)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = epochs_of(tmp_path / "run")
    assert len(records) == 2 and records[-1]["ema_val_accuracy"] >= 0.8
    lrs = [r["lr"] for r in epochs_of(tmp_path / "run" / "workers" / "worker-0")]
    assert lrs[0] > lrs[-1] >= 0  # each worker's rate follows the cosine (to 0 at the end)


def test_asgd_warms_up_from_an_eighth_of_the_rate_by_default(tmp_path):
    """ASGD's defaults (2 workers, no option set): each worker's rate climbs from MODEL_LR / 8 to it over the first 3
    epochs (WARMUP_EPOCHS, WARMUP_START_FACTOR), per step, and the rule learns; a start factor of the user's own
    without WARMUP_EPOCHS is refused in one line before any rank starts (ASGD's own 1/8 is no warm-up then)."""
    cfg = write_cfg(tmp_path / "s.cfg", RULE="ASGD", MODEL_HIDDEN=32, N_EPOCHS=4, RUN_DIR="run")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lrs = [r["lr"] for r in epochs_of(tmp_path / "run")]  # worker 0's, at each epoch's last step
    # the ramp from 1/8: 0.125 + 0.875 * progress / 3 at the epochs' ends (progress just under 1, 2, 3), then 1
    assert 0.05 / 8 < lrs[0] < 0.05 * 0.42 < lrs[1] < 0.05 * 0.71 < lrs[2] < 0.05 and lrs[3] == pytest.approx(0.05)
    assert "ASGD: the learning rate warms up from 0.125 of its value over the first 3 epochs" in proc.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_val_accuracy"] >= 0.85
    cfg = write_cfg(tmp_path / "bad.cfg", RULE="ASGD", MODEL_HIDDEN=32, RUN_DIR="never", WARMUP_EPOCHS=0,
                    WARMUP_START_FACTOR=0.25)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode != 0 and not (tmp_path / "never").exists()
    assert proc.stderr.strip().splitlines() == ["tmlauncher: error: WARMUP_START_FACTOR=0.25 needs WARMUP_EPOCHS (the "
                                                "epochs over which the learning rate ramps up from it), e.g. "
                                                "WARMUP_EPOCHS=3"]
