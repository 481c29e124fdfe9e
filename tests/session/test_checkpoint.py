"""Checkpoint files without ranks: resuming from a directory skips a damaged newest checkpoint.
(Checkpoints and resume under a real mpiexec: tests/sessions/test_resume.py.)"""

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
