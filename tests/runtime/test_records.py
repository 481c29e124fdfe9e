"""The end-of-session sequence (one owner: session_records.end_session) and the progress line, without MPI."""

import json
from types import SimpleNamespace

import numpy as np
import pytensor

from theanompi.runtime.records import end_session, load_final_params
from theanompi.session.recorder import Recorder


class Model(SimpleNamespace):
    def cleanup(self):
        self.cleaned = True


def finished_recorder(run_dir):
    recorder = Recorder(run_dir, write=True)
    recorder.record_train(0.5, 0.25, 4)
    recorder.end_iteration()
    recorder.end_epoch(0, {"val_loss": 0.4, "val_accuracy": 0.875, "elapsed_s": 1.5})
    return recorder


def test_the_final_model_and_summary_are_written_then_everything_is_closed(tmp_path):
    params = [pytensor.shared(np.arange(3, dtype="float32")), pytensor.shared(np.ones((2, 2), dtype="float32"))]
    model = Model(params=params, cleaned=False)
    end_session(model, finished_recorder(tmp_path), tmp_path, {"rule": "BSP", "workers": 2, "iterations": 7})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rule"] == "BSP" and summary["iterations"] == 7 and summary["epochs"] == 1
    assert summary["final_val_accuracy"] == 0.875 and summary["wall_s"] == 1.5
    assert summary["final_params"] == str(tmp_path / "final_params.npz")
    saved = load_final_params(tmp_path)
    assert [a.tolist() for a in saved] == [p.get_value().tolist() for p in params]
    assert model.cleaned


def test_a_summary_without_a_final_model_and_a_rank_that_writes_nothing(tmp_path):
    model = Model(params=[], cleaned=False)
    end_session(model, finished_recorder(tmp_path), None, {"rule": "EASGD", "worker": 1}, final_model=False)
    assert json.loads((tmp_path / "summary.json").read_text()) == {"rule": "EASGD", "worker": 1, "compile_s": 0.0}
    assert not (tmp_path / "final_params.npz").exists() and model.cleaned
    silent = Model(params=[], cleaned=False)
    end_session(silent, Recorder(tmp_path / "other", write=False), None, None)
    assert silent.cleaned and not (tmp_path / "other").exists()


def test_the_progress_line_counts_days():
    from theanompi.runtime.records import format_duration

    assert format_duration(3 * 86400 + 3600 + 61) == "3 d 01:01:01"
    assert format_duration(1e12) == "11574074 d 01:46:40"  # no wrap at 24 h, no overflow
