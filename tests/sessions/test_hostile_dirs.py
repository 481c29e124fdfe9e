"""Run and checkpoint directories someone else could write into, and files that are not what they seem, under real
tmlauncher sessions (issue 39, items 1, 2 and 5).

* a link planted where theanompi writes (``RUN_DIR/.session.lock``, ``previous``, ``ranks``, the records, the
  checkpoints' folder and ``latest``) is never written through: the session refuses it in one line (exit 2, before
  any rank starts) or sets it aside as the link it is; the marker file or folder it points to stays byte-identical
  (the suite runs as root here: root included);
* an entry of a reused RUN_DIR or CHECKPOINT_DIR that is not what theanompi keeps there (a file where a directory
  belongs, a FIFO, a mount point, a directory it may not change) is one line and exit 2, never a traceback;
* a FIFO or a device where theanompi reads a file (``latest``, a checkpoint, the cfg file) is refused at once;
* a session resumed into the RUN_DIR of the session it continues keeps one record per epoch and iteration: in
  ``epochs.jsonl``, ``iterations.jsonl``, the TensorBoard events (TensorBoard's own reader) and EASGD's workers'.

(The unit tests of the mechanism: tests/core/test_no_follow.py, tests/session/test_run_dir.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_launcher, tensorboard_points, write_cfg

MARKER = b"a file of someone else's: it must stay as it is\n"


pytestmark = pytest.mark.usefixtures("ends_its_processes")  # kills what a failed launch leaves


def make_outside(tmp_path: Path) -> Path:
    """A folder outside every run directory, with a marker file and a marker folder (the targets of planted links)."""
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "marker").write_bytes(MARKER)
    (outside / "folder" / "kept").write_bytes(MARKER)
    return outside


def tree(path: Path) -> dict[str, bytes | str]:
    """Every entry under ``path`` (links not followed): file -> its bytes, link -> its target, folder -> 'dir'."""
    found: dict[str, bytes | str] = {}
    for entry in sorted(path.rglob("*")):
        st = entry.lstat()
        key = str(entry.relative_to(path))
        found[key] = (f"-> {os.readlink(entry)}" if stat.S_ISLNK(st.st_mode) else
                      "dir" if stat.S_ISDIR(st.st_mode) else entry.read_bytes())
    return found


def plant(path: Path, how: str, outside: Path) -> None:
    """Put ``how`` at ``path``: a link to the marker file or folder, a regular file, a FIFO."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if how == "link to file":
        path.symlink_to(outside / "marker")
    elif how == "link to folder":
        path.symlink_to(outside / "folder")
    elif how == "file":
        path.write_text("not what theanompi keeps here\n")
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "dir":
        path.mkdir()
    else:
        raise ValueError(how)


def assert_refused(proc: subprocess.CompletedProcess, fragment: str) -> None:
    """One line, exit 2, no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith("tmlauncher: error: "), proc.stderr
    assert fragment in lines[0], lines[0]


def earlier_records(run: Path) -> None:
    """What an earlier session left in ``run``."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "epochs.jsonl").write_text(json.dumps({"epoch": 0, "val_accuracy": 0.1}) + "\n")


# ----- links where theanompi writes: refused at launch ----------------------------------------------------------------
#: entry (below tmp_path) -> (what is planted, the session's keys, the start of the path's description in the error)
REFUSED_LINKS = {
    "run/.session.lock": ("link to file", {}, "RUN_DIR: {run}/.session.lock is a symbolic link (to {outside}/marker)"),
    "run/previous": ("link to folder", {}, "RUN_DIR: {run}/previous is a symbolic link (to {outside}/folder)"),
    "run/ranks": ("link to folder", {}, "RUN_DIR: {run}/ranks is a symbolic link (to {outside}/folder)"),
    "run/session.json": ("link to file", {}, "RUN_DIR: {run}/session.json is a symbolic link"),
    "run/checkpoints": ("link to folder", {"CHECKPOINT_EVERY": 1},
                        "CHECKPOINT_DIR: {run}/checkpoints is a symbolic link (to {outside}/folder)"),
    "run/checkpoints/.session.lock": ("link to file", {"CHECKPOINT_EVERY": 1},
                                      "CHECKPOINT_DIR: {run}/checkpoints/.session.lock is a symbolic link"),
    "run/checkpoints/previous": ("link to folder", {"CHECKPOINT_EVERY": 1},
                                 "CHECKPOINT_DIR: {run}/checkpoints/previous is a symbolic link"),
    "ckpts/previous": ("link to folder", {"CHECKPOINT_EVERY": 1, "CHECKPOINT_DIR": "ckpts"},
                       "CHECKPOINT_DIR: {tmp}/ckpts/previous is a symbolic link"),
}


@pytest.mark.parametrize("entry", sorted(REFUSED_LINKS))
def test_a_link_planted_where_the_launcher_writes_is_refused_and_its_target_kept(tmp_path, entry):
    how, keys, fragment = REFUSED_LINKS[entry]
    outside = make_outside(tmp_path)
    run = tmp_path / "run"
    earlier_records(run)  # so that records are set aside: through a planted previous/, they would leave RUN_DIR
    if "checkpoints" in entry or "ckpts" in entry:
        ckpts = tmp_path / ("ckpts" if "ckpts" in entry else "run/checkpoints")
        ckpts.mkdir(parents=True, exist_ok=True)
        (ckpts / "ckpt-epoch-0003.hkl").write_bytes(b"an earlier session's checkpoint")
    plant(tmp_path / entry, how, outside)
    before = tree(outside)
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", N_EPOCHS=1, **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    assert_refused(proc, fragment.format(run=run, outside=outside, tmp=tmp_path))
    assert "remove or rename it" in proc.stderr
    assert tree(outside) == before
    assert not (run / "ranks" / "rank-0.pid").exists() and (run / "epochs.jsonl").is_file()


def test_links_at_the_records_names_are_set_aside_as_links_never_written_through(tmp_path):
    """A fresh session moves an earlier session's records away whatever they are: a link is moved as the link it
    is. The session runs, writes its own records, and every target stays as it was."""
    outside = make_outside(tmp_path)
    run = tmp_path / "run"
    records = {"epochs.jsonl": "link to file", "iterations.jsonl": "link to file", "summary.json": "link to file",
               "final_params.npz": "link to file", "curves.png": "link to file", "tensorboard": "link to folder",
               "workers": "link to folder", "checkpoints/latest": "link to file",
               "checkpoints/ckpt-epoch-0000.hkl": "link to file"}
    for name, how in records.items():
        plant(run / name, how, outside)
    before = tree(outside)
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", N_EPOCHS=1, CHECKPOINT_EVERY=1, PLOTS="true")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert tree(outside) == before
    (earlier,) = (run / "previous").iterdir()
    assert sorted(p.name for p in earlier.iterdir()) == sorted(n for n in records if "/" not in n)
    assert all(p.is_symlink() for p in earlier.iterdir())
    (earlier_ckpts,) = (run / "checkpoints" / "previous").iterdir()
    assert sorted(p.name for p in earlier_ckpts.iterdir()) == ["ckpt-epoch-0000.hkl", "latest"]
    for name in ("epochs.jsonl", "summary.json", "final_params.npz", "curves.png", "checkpoints/latest"):
        assert (run / name).is_file() and not (run / name).is_symlink(), name
    assert (run / "tensorboard").is_dir() and not (run / "tensorboard").is_symlink()


# ----- a resumed session appends: a link or a FIFO among its records is refused ---------------------------------------
RESUME_PLANTS = {
    "epochs.jsonl": ("link to file", "RUN_DIR: {run}/epochs.jsonl is a symbolic link (to {outside}/marker)"),
    "iterations.jsonl": ("fifo", "RUN_DIR: {run}/iterations.jsonl is a FIFO (named pipe), where theanompi keeps a "
                                 "regular file"),
    "tensorboard": ("link to folder", "RUN_DIR: {run}/tensorboard is a symbolic link (to {outside}/folder)"),
    "summary.json": ("link to file", "RUN_DIR: {run}/summary.json is a symbolic link"),
}


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """A finished one-epoch session that saved a checkpoint (copied by each test that resumes it)."""
    base = tmp_path_factory.mktemp("checkpointed")
    cfg = write_cfg(base / "s.cfg", RUN_DIR="run", N_EPOCHS=1, CHECKPOINT_EVERY=1)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=base)
    assert proc.returncode == 0, proc.stderr
    return base / "run"


def test_a_resumed_session_refuses_links_and_fifos_among_the_records_it_continues(tmp_path, checkpointed):
    outside = make_outside(tmp_path)
    run = tmp_path / "run"
    for name, (how, fragment) in sorted(RESUME_PLANTS.items()):
        if run.exists():
            shutil.rmtree(run)
        shutil.copytree(checkpointed, run, symlinks=True)
        plant(run / name, how, outside)
        before = tree(outside)
        cfg = write_cfg(tmp_path / "r.cfg", RUN_DIR="run", N_EPOCHS=2, RESUME="run/checkpoints")
        proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
        assert_refused(proc, fragment.format(run=run, outside=outside))
        assert tree(outside) == before, name
    shutil.rmtree(run)
    shutil.copytree(checkpointed, run, symlinks=True)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)  # the same without a planted entry: it resumes
    assert proc.returncode == 0, proc.stderr


# ----- unexpected entries in a reused directory: one line, exit 2 -----------------------------------------------------
#: entry -> (what is planted, keys, fragment of the one line)
UNEXPECTED = {
    "previous, a regular file": ("run/previous", "file", {},
                                 "RUN_DIR: {run}/previous is a regular file, where theanompi keeps a directory"),
    "previous, a FIFO": ("run/previous", "fifo", {}, "RUN_DIR: {run}/previous is a FIFO (named pipe)"),
    "ranks, a regular file": ("run/ranks", "file", {}, "RUN_DIR: {run}/ranks is a regular file"),
    "RUN_DIR itself, a regular file": ("run", "file", {}, "RUN_DIR='{run}' is a regular file, not a directory"),
    "RUN_DIR itself, a FIFO": ("run", "fifo", {}, "RUN_DIR='{run}' is a FIFO (named pipe), not a directory"),
    "checkpoints' previous, a file": ("run/checkpoints/previous", "file", {"CHECKPOINT_EVERY": 1},
                                      "CHECKPOINT_DIR: {run}/checkpoints/previous is a regular file"),
    "session.json, a directory": ("run/session.json", "dir", {},
                                  "RUN_DIR: {run}/session.json is a directory, where theanompi keeps a regular file"),
}


@pytest.mark.parametrize("case", sorted(UNEXPECTED))
def test_an_unexpected_entry_in_a_reused_directory_is_one_line_before_any_rank(tmp_path, case):
    entry, how, keys, fragment = UNEXPECTED[case]
    run = tmp_path / "run"
    if entry != "run":
        earlier_records(run)
    plant(tmp_path / entry, how, tmp_path)
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", N_EPOCHS=1, **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    assert_refused(proc, fragment.format(run=run))
    assert "Traceback" not in proc.stderr
    assert not (run / "ranks" / "rank-0.pid").exists() and not (run / "session.json").is_file()


def _in_private_mounts(tmp_path: Path, script: str, cfg: Path) -> subprocess.CompletedProcess:
    """``script`` (mounts) then tmlauncher, in a private mount namespace: the mounts go with it."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private mount")
    exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", f'{script} || exit 99; exec "{exe}" -cfg="{cfg}"'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if proc.returncode == 99:
        pytest.skip(f"cannot mount here: {proc.stderr.strip()}")
    return proc


def test_previous_on_another_file_system_is_refused_before_anything_moves(tmp_path):
    """Records are set aside by renaming; a mount point at previous/ would fail half-way with EXDEV."""
    run = tmp_path / "run"
    earlier_records(run)
    (run / "previous").mkdir()
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", N_EPOCHS=1)
    proc = _in_private_mounts(tmp_path, f'mount -t tmpfs -o size=1m tmpfs "{run / "previous"}"', cfg)
    assert_refused(proc, f"RUN_DIR: {run}/previous is on another file system (a mount point)")
    assert (run / "epochs.jsonl").is_file()


def test_a_directory_the_session_may_not_change_is_named(tmp_path):
    """As root too: an immutable ranks/ (chattr +i) cannot be emptied; the line names it."""
    run = tmp_path / "run"
    (run / "ranks").mkdir(parents=True)
    (run / "ranks" / "rank-0.failed").write_text("an old failure\n")
    if subprocess.run(["chattr", "+i", str(run / "ranks")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work here")
    try:
        cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", N_EPOCHS=1)
        proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    finally:
        subprocess.run(["chattr", "-i", str(run / "ranks")], capture_output=True)
    assert_refused(proc, f"RUN_DIR: {run}/ranks cannot be emptied: Operation not permitted")


# ----- files read: FIFOs, devices -------------------------------------------------------------------------------------
def _resume_with_latest(tmp_path: Path, checkpointed: Path, how: str) -> subprocess.CompletedProcess:
    shutil.copytree(checkpointed, tmp_path / "a", symlinks=True)
    latest = tmp_path / "a" / "checkpoints" / "latest"
    if how == "checkpoint fifo":
        os.mkfifo(latest.with_name("ckpt-epoch-0003.hkl"))
    else:
        latest.unlink()
    if how == "fifo":
        os.mkfifo(latest)
    elif how == "link to /dev/zero":
        latest.symlink_to("/dev/zero")
    cfg = write_cfg(tmp_path / "r.cfg", RUN_DIR="b", N_EPOCHS=2, RESUME="a/checkpoints")
    return run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=60)[0]


@pytest.mark.parametrize("how, fragment", [
    ("fifo", "RESUME: {ckpts}/latest is a FIFO (named pipe), where theanompi keeps a regular file"),
    ("link to /dev/zero", "RESUME: {ckpts}/latest is a symbolic link (to /dev/zero)"),
    ("checkpoint fifo", "RESUME: {ckpts}/ckpt-epoch-0003.hkl is a FIFO (named pipe), where theanompi keeps a regular "
                        "file"),
])
def test_latest_or_a_checkpoint_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path, checkpointed, how, fragment):
    proc = _resume_with_latest(tmp_path, checkpointed, how)
    assert_refused(proc, fragment.format(ckpts=tmp_path / "a" / "checkpoints"))


def test_a_cfg_file_or_checkpoint_that_is_a_fifo_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "s.cfg")
    proc, _ = run_launcher("-cfg=s.cfg", cwd=tmp_path, timeout=60)
    assert_refused(proc, "cfg file 's.cfg' is a FIFO (named pipe), not a regular file")
    os.mkfifo(tmp_path / "ckpt.hkl")
    cfg = write_cfg(tmp_path / "r.cfg", RUN_DIR="b", RESUME="ckpt.hkl")
    proc, _ = run_launcher("-cfg=r.cfg", cwd=tmp_path, timeout=60)
    assert_refused(proc, f"RESUME='{tmp_path}/ckpt.hkl' is a FIFO (named pipe), not a checkpoint file")
    assert cfg.is_file()


# ----- records trimmed back to the checkpoint on resume ---------------------------------------------------------------
def _rows(path: Path, key: str) -> list[int]:
    return [json.loads(line)[key] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("rule", ["BSP", "EASGD"])
def test_a_resumed_session_keeps_one_record_per_epoch_and_iteration_everywhere(tmp_path, rule):
    """Three epochs with a checkpoint after each; then the same RUN_DIR resumed from the first checkpoint for three
    epochs: epochs 2 and 3 are trained again, and every record of them is the second session's alone."""
    keys = dict(RULE=rule, RUN_DIR="run", N_EPOCHS=3, CHECKPOINT_EVERY=1, TENSORBOARD_EVERY=4)
    if rule == "EASGD":
        keys.update(DEVICES="cpu0,cpu1,cpu2", EASGD_TAU=2)
    proc, _ = run_launcher(f"-cfg={write_cfg(tmp_path / 'a.cfg', **keys)}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "run"
    first_workers = {d.name: _rows(d / "epochs.jsonl", "epoch") for d in sorted((run / "workers").glob("worker-*"))}
    resume = dict(keys, RESUME="run/checkpoints/ckpt-epoch-0000.hkl")
    proc, _ = run_launcher(f"-cfg={write_cfg(tmp_path / 'b.cfg', **resume)}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    epochs = [json.loads(line) for line in (run / "epochs.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1, 2]
    iterations = _rows(run / "iterations.jsonl", "iteration")
    assert iterations == sorted(set(iterations)), "an iteration recorded twice"
    scalars, texts = tensorboard_points(run / "tensorboard")
    for tag, points in scalars.items():
        steps = [step for step, _ in points]
        assert steps == sorted(set(steps)), f"{tag}: a step shown twice: {steps}"
    assert [step for step, _ in scalars["val/accuracy"]] == [1, 2, 3]
    assert [v for _, v in scalars["val/accuracy"]] == pytest.approx([e["val_accuracy"] for e in epochs])
    assert len(texts["session/options"]) == 1 and "RESUME" in texts["session/options"][0]
    for worker, first in first_workers.items():  # EASGD: each worker's shard epochs, once each
        records = run / "workers" / worker
        again = _rows(records / "epochs.jsonl", "epoch")
        assert again == sorted(set(again)) and len(again) >= len(first) - 1, (worker, first, again)
        worker_iterations = _rows(records / "iterations.jsonl", "iteration")
        assert worker_iterations == sorted(set(worker_iterations)), worker
        worker_scalars, _ = tensorboard_points(run / "tensorboard" / "workers" / worker)
        for tag, points in worker_scalars.items():
            steps = [step for step, _ in points]
            assert steps == sorted(set(steps)), f"{worker} {tag}: a step shown twice: {steps}"
