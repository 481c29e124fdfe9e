import json
import time

import pytest

from theanompi.session.plots import epoch_walls, plot_run
from theanompi.session.recorder import Recorder


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
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is True and summary["compile_s"] >= 0  # the one iteration was the warm-up


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
    proc = subprocess.run([sys.executable, "-m", "theanompi.session.recorder", str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "curves.png").stat().st_size > 1000 and (tmp_path / "breakdown.png").stat().st_size > 1000
    bad = subprocess.run([sys.executable, "-m", "theanompi.session.recorder", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_compile_is_a_phase_of_its_own(tmp_path):
    rec = Recorder(tmp_path)
    rec.record_phase("compile", 1.5)  # the model's build, before the recorder started
    for step in range(3):
        with rec.timer("calc"):
            time.sleep(0.3 if step == 0 else 0.01)  # the first call compiles
        rec.end_iteration()
    first = rec.end_epoch(0, {})
    with rec.timer("calc"):
        time.sleep(0.01)
    rec.end_iteration()
    second = rec.end_epoch(1, {})
    rec.write_summary({"ok": True}, plots=False)
    assert 1.75 < first["compile_s"] < 2.5 and second["compile_s"] == 0.0
    assert 0.015 < first["calc_s"] < 0.25  # the two later steps only
    assert first["elapsed_no_compile_s"] < 0.28  # the warm-up is not on the time axis
    assert first["elapsed_no_compile_s"] < second["elapsed_no_compile_s"]
    rows = [json.loads(line) for line in (tmp_path / "iterations.jsonl").read_text().splitlines()]
    assert [r.get("compile", False) for r in rows] == [True, False, False, False]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert abs(summary["compile_s"] - rec.totals["compile"]) < 1e-5


def test_the_first_validation_call_is_compile_and_off_the_time_axis():
    rec = Recorder(None)
    start = time.perf_counter()
    time.sleep(0.3)  # the first call: pytensor builds the function's thunks
    rec.first_validation_call(time.perf_counter() - start)
    rec.first_validation_call(0.2)  # a later call: not compile
    epoch = rec.end_epoch(0, {})
    assert 0.3 <= epoch["compile_s"] < 0.5 and abs(rec.totals["compile"] - epoch["compile_s"]) < 1e-5
    assert epoch["elapsed_no_compile_s"] < 0.1  # the recorder's clock, less the compile
    server = Recorder(None, warmup_iterations=0)  # warmed up by its owner (the EASGD server)
    server.first_validation_call(0.3)
    assert server.totals["compile"] == 0.0


def test_no_warm_up_when_asked_and_unknown_phases_are_refused():
    rec = Recorder(None, warmup_iterations=0)
    with rec.timer("calc"):
        time.sleep(0.01)
    rec.end_iteration()
    assert rec.end_epoch(0, {})["calc_s"] > 0.005 and rec.totals["compile"] == 0.0
    with pytest.raises(ValueError, match="phase 'nap'"):
        rec.record_phase("nap", 1.0)


def _synthetic_epochs(run_dir, n_epochs):
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "epochs.jsonl", "w") as f:
        for e in range(n_epochs):
            f.write(json.dumps({"epoch": e, "train_loss_all": 1.0 / (e + 1), "val_loss": 1.2 / (e + 1),
                                "val_accuracy": 0.5 + 0.4 * e / max(1, n_epochs), "calc_s": 0.1, "comm_s": 0.05,
                                "wait_s": 0.01, "compile_s": 3.0 if e == 0 else 0.0,
                                "elapsed_no_compile_s": 0.2 * (e + 1), "elapsed_s": 3.0 + 0.2 * (e + 1)}) + "\n")


@pytest.mark.parametrize("n_epochs", [1, 2, 60])
def test_plots_of_short_and_long_runs(tmp_path, n_epochs):
    _synthetic_epochs(tmp_path, n_epochs)
    _synthetic_epochs(tmp_path / "workers" / "worker-1", n_epochs)
    paths = plot_run(tmp_path)
    assert [p.name for p in paths] == ["curves.png", "breakdown.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_epoch_walls_are_the_time_axis_differences():
    walls = epoch_walls([{"elapsed_no_compile_s": 0.5}, {"elapsed_no_compile_s": 0.75}, {"elapsed_no_compile_s": 1.5}])
    assert walls == [0.5, 0.25, 0.75]
    assert epoch_walls([{"elapsed_s": 1.0}]) is None  # records from before the compile phase
