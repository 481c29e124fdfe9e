import json
import time

import pytest

from theanompi.recorder import Recorder


def test_nested_timer_time_is_not_counted_twice():
    rec = Recorder(run_dir=None)
    with rec.timer("calc"):
        time.sleep(0.02)
        with rec.timer("wait"):
            time.sleep(0.05)
    it = rec.end_iteration()
    assert 0.045 < it["wait"] < 0.2
    assert 0.015 < it["calc"] < 0.045


def test_unknown_timer_kind():
    with pytest.raises(ValueError, match="timer kind"):
        with Recorder(None).timer("nap"):
            pass


def test_files_written(tmp_path):
    rec = Recorder(tmp_path)
    rec.record_train(1.0, 0.5, 2)
    rec.record_train(3.0, 0.0, 2)
    rec.end_iteration()
    rec.record_val(0.5, 0.1, 10)
    assert rec.val_sums() == [5.0, 1.0, 10]
    record = rec.end_epoch(0, {"val_accuracy": 0.9})
    assert record["train_loss"] == 2.0 and record["train_error"] == 0.25
    rec.write_summary({"ok": True})
    rec.close()
    lines = (tmp_path / "iterations.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["iteration"] == 0
    assert json.loads((tmp_path / "epochs.jsonl").read_text())["val_accuracy"] == 0.9
    assert json.loads((tmp_path / "summary.json").read_text()) == {"ok": True}


def test_recorder_cli_redraws_plots(tmp_path):
    import subprocess
    import sys

    rec = Recorder(tmp_path)
    for epoch in range(3):
        with rec.timer("calc"):
            rec.record_train(1.0 / (epoch + 1), 0.1, 8)
        rec.end_iteration()
        rec.end_epoch(epoch, {"train_loss_all": 1.0 / (epoch + 1), "val_loss": 0.5, "val_accuracy": 0.9,
                              "elapsed_s": float(epoch)})
    rec.write_summary({"ok": True}, plots=False)
    assert not (tmp_path / "curves.png").exists()
    proc = subprocess.run([sys.executable, "-m", "theanompi.recorder", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "curves.png").stat().st_size > 1000 and (tmp_path / "breakdown.png").stat().st_size > 1000
    bad = subprocess.run([sys.executable, "-m", "theanompi.recorder", str(tmp_path / "nope")], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr
