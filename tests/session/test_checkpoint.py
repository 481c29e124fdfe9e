"""Checkpoint files without ranks: resuming from a directory skips a damaged newest checkpoint.
(Checkpoints and resume under a real mpiexec: tests/sessions/test_resume.py.)"""

import re

import numpy as np
import pytest

from theanompi.core.errors import ConfigError


def test_resume_from_a_directory_skips_a_damaged_newest_checkpoint(tmp_path, caplog):
    from theanompi.session.checkpoint import load_newest_intact, save_checkpoint

    for epoch in (0, 1, 2):
        path = save_checkpoint(tmp_path, {"rule": "BSP", "epoch": epoch, "iteration": epoch, "n_workers": 1,
                                          "worker_params": [[np.zeros(2, "float32")]], "worker_state": [[]]})
    path.write_bytes(path.read_bytes()[:100])  # the newest one, cut short
    with caplog.at_level("WARNING", logger="theanompi"):
        found, payload = load_newest_intact(tmp_path)
    assert found == tmp_path / "ckpt-epoch-0001.hkl" and payload["epoch"] == 1
    assert "skipped the damaged checkpoint" in caplog.text and "ckpt-epoch-0002.hkl" in caplog.text
    with pytest.raises(ConfigError, match="ckpt-epoch-0001.hkl' can be resumed instead"):
        load_newest_intact(path)
    (tmp_path / "ckpt-epoch-0001.hkl").write_bytes(b"garbage")
    (tmp_path / "ckpt-epoch-0000.hkl").write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="ckpt-epoch-0002.hkl"):  # nothing intact: the newest one's error
        load_newest_intact(tmp_path)


def _two_checkpoints(directory):
    from theanompi.session.checkpoint import save_checkpoint

    for epoch in (0, 1):
        save_checkpoint(directory, {"rule": "BSP", "epoch": epoch, "iteration": epoch, "n_workers": 1,
                                    "worker_params": [[np.full(2, epoch, "float32")]], "worker_state": [[]]})


#: what is wrong with 'latest' -> how to make it so (the directory holds intact checkpoints of epochs 0 and 1)
BAD_LATEST = {
    "missing": lambda d, elsewhere: (d / "latest").unlink(),
    "empty": lambda d, elsewhere: (d / "latest").write_text("\n"),
    "dangling": lambda d, elsewhere: (d / "latest").write_text("ckpt-epoch-0007.hkl\n"),
    "an absolute path elsewhere": lambda d, elsewhere: (d / "latest").write_text(f"{elsewhere}\n"),
    "a path out of the directory": lambda d, elsewhere: (d / "latest").write_text(f"../{elsewhere.name}\n"),
}


@pytest.mark.parametrize("wrong", sorted(BAD_LATEST))
def test_resume_from_a_directory_whose_latest_names_no_checkpoint_takes_the_newest_intact(tmp_path, caplog, wrong):
    from theanompi.session.checkpoint import load_newest_intact, resolve_checkpoint, save_checkpoint

    directory = tmp_path / "ckpts"
    _two_checkpoints(directory)
    elsewhere = save_checkpoint(tmp_path / "other", {"rule": "BSP", "epoch": 9, "iteration": 9, "n_workers": 1,
                                                     "worker_params": [[np.zeros(2, "float32")]],
                                                     "worker_state": [[]]})
    (tmp_path / elsewhere.name).write_bytes(elsewhere.read_bytes())  # also reachable as ckpts/../<name>
    BAD_LATEST[wrong](directory, elsewhere)
    with caplog.at_level("WARNING", logger="theanompi"):
        found, payload = load_newest_intact(directory)
    assert found == directory / "ckpt-epoch-0001.hkl" and payload["epoch"] == 1  # never the one elsewhere
    assert "'latest'" in caplog.text and "resuming from the newest intact checkpoint" in caplog.text
    assert resolve_checkpoint(directory) == found


@pytest.mark.parametrize("field, value, says", [
    ("epoch", -3, "the checkpoint's epoch is -3, not an integer >= 0"),
    ("epoch", "three", "the checkpoint's epoch is three, not an integer >= 0"),
    ("iteration", 1.5, "the checkpoint's iteration is 1.5, not an integer >= 0"),
    ("n_workers", 0, "the checkpoint's n_workers is 0, not an integer >= 1"),
    ("worker_params", [[]], "the checkpoint's worker_params is [[]], not a list of one list per worker"),
])
def test_a_checkpoint_with_a_field_out_of_shape_is_refused_naming_it(tmp_path, field, value, says):
    from theanompi.core.safe_io import save_hickle_atomically
    from theanompi.session.checkpoint import load_checkpoint

    payload = {"format": 1, "rule": "BSP", "epoch": 0, "iteration": 0, "n_workers": 2,
               "worker_params": [[np.zeros(2)], [np.zeros(2)]], "worker_state": [[], []], field: value}
    path = save_hickle_atomically(payload, tmp_path / "c.hkl")
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_checkpoint(path)


def test_a_save_removes_what_a_killed_writer_left(tmp_path):
    from theanompi.core.safe_io import temporary_path
    from theanompi.session.checkpoint import save_checkpoint

    stale = [temporary_path(tmp_path / "ckpt-epoch-0004.hkl", pid=999999), temporary_path(tmp_path / "latest", 999999)]
    for path in stale:
        path.write_bytes(b"half")
    save_checkpoint(tmp_path, {"rule": "BSP", "epoch": 0, "iteration": 0, "n_workers": 1,
                               "worker_params": [[np.zeros(2, "float32")]], "worker_state": [[]]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-epoch-0000.hkl", "latest"]


def test_checkpoints_are_ordered_by_epoch_past_9999(tmp_path):
    from theanompi.session.checkpoint import checkpoints_newest_first

    for name in ("ckpt-epoch-9999.hkl", "ckpt-epoch-10000.hkl", "ckpt-epoch-0002.hkl"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in checkpoints_newest_first(tmp_path)] == ["ckpt-epoch-10000.hkl", "ckpt-epoch-9999.hkl",
                                                                    "ckpt-epoch-0002.hkl"]


def _payload(epoch, units=0, iteration=0, **more):
    return {"rule": "BSP", "epoch": epoch, "epoch_units": units, "iteration": iteration, "n_workers": 1,
            "worker_params": [[np.zeros(2, "float32")]], "worker_state": [[]], **more}


def test_checkpoints_inside_epochs_order_after_their_epoch_and_only_the_newest_two_are_kept(tmp_path):
    from theanompi.session.checkpoint import checkpoints_newest_first, load_newest_intact, save_checkpoint

    save_checkpoint(tmp_path, _payload(-1, units=300, iteration=4))  # inside the first epoch
    for units in (300, 600, 900):
        save_checkpoint(tmp_path, _payload(0, units=units, iteration=10 + units))
    save_checkpoint(tmp_path, _payload(0, iteration=5))
    names = [p.name for p in checkpoints_newest_first(tmp_path)]
    assert names == ["ckpt-epoch-0001-at-000000900.hkl", "ckpt-epoch-0001-at-000000600.hkl", "ckpt-epoch-0000.hkl"]
    (tmp_path / "latest").unlink()
    path, payload = load_newest_intact(tmp_path)
    assert path.name == "ckpt-epoch-0001-at-000000900.hkl" and (payload["epoch"], payload["epoch_units"]) == (0, 900)


def test_an_epoch_before_the_first_is_only_allowed_inside_it(tmp_path):
    from theanompi.session.checkpoint import check_fields

    check_fields("c.hkl", _payload(-1, units=300))
    with pytest.raises(ConfigError, match="the checkpoint's epoch is -1, not an integer >= 0 \\(-1 only inside"):
        check_fields("c.hkl", _payload(-1))


def test_the_consensus_of_workers_that_differ_is_their_mean_and_of_identical_ones_their_own_bits():
    from theanompi.session.checkpoint import consensus

    one = np.float32(0.1) * np.arange(3, dtype="float32")
    params, state = consensus({"worker_params": [[one], [one], [one]], "worker_state": [[one], [one], [one]]})
    assert params[0].tobytes() == one.tobytes() and state[0].tobytes() == one.tobytes()
    params, state = consensus({"worker_params": [[np.zeros(2, "float32")], [np.ones(2, "float32")]],
                               "worker_state": [[], []]})
    assert params[0].tolist() == [0.5, 0.5] and params[0].dtype == np.float32 and state == []


def test_a_failed_background_write_is_raised_at_the_next_checkpoint(tmp_path):
    from theanompi.session.checkpoint_writer import CheckpointWriter

    blocked = tmp_path / "file"
    blocked.write_text("a file where the directory should be")
    writer = CheckpointWriter(blocked)
    writer.save(_payload(0))
    with pytest.raises(FileExistsError):
        writer.save(_payload(1))
    assert writer.wait() is None
