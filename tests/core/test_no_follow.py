"""No link followed where theanompi writes, moves or deletes, and files read only when regular and bounded
(theanompi.core.no_follow and every writer that goes through it). Each case plants a link to a marker outside the
directory, does what a session does there, and checks that the marker is byte-identical (as root too: the suite
runs as root here). Sessions doing the same: tests/sessions/test_hostile_dirs.py."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

from theanompi.core.no_follow import (
    FileTooLarge,
    Folder,
    UnexpectedEntry,
    bounded_lines,
    read_bounded,
)
from theanompi.core.safe_io import atomic_write, atomic_write_text, save_hickle_atomically, temporary_path

MARKER = b"someone else's file\n"


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "outside" / "marker"
    path.parent.mkdir()
    path.write_bytes(MARKER)
    yield path
    assert path.read_bytes() == MARKER and not path.is_symlink()


@pytest.fixture
def run(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    return path


def test_a_link_at_the_temporary_name_is_removed_never_written_through(run, marker):
    (run / temporary_path("latest").name).symlink_to(marker)
    atomic_write_text(run / "latest", "ckpt-epoch-0001.hkl\n")
    assert (run / "latest").read_text() == "ckpt-epoch-0001.hkl\n"
    assert sorted(p.name for p in run.iterdir()) == ["latest"]


def test_a_link_at_the_target_is_replaced_never_written_through(run, marker):
    (run / "summary.json").symlink_to(marker)
    atomic_write(run / "final_params.npz", lambda f: np.savez(f, p000=np.arange(3)))
    atomic_write_text(run / "summary.json", "{}")
    assert not (run / "summary.json").is_symlink() and (run / "summary.json").read_text() == "{}"


def test_hickle_is_written_through_the_temporary_files_descriptor(run, marker):
    (run / temporary_path("ckpt-epoch-0000.hkl").name).symlink_to(marker)
    path = save_hickle_atomically({"epoch": 0}, run / "ckpt-epoch-0000.hkl")
    assert path.is_file() and not path.is_symlink()


@pytest.mark.parametrize("between", ["link to a folder", "regular file"])
def test_folders_below_the_root_are_never_links(run, marker, between):
    if between == "link to a folder":
        (run / "workers").symlink_to(marker.parent)
    else:
        (run / "workers").write_text("x")
    with pytest.raises(UnexpectedEntry, match=r"^RUN_DIR: .*/run/workers is (a symbolic link \(to .*/outside\)|a "
                                              r"regular file), where theanompi keeps a directory: remove or rename "
                                              r"it, or choose another RUN_DIR$"):
        atomic_write_text(run / "workers" / "worker-1" / "summary.json", "{}", root=run, label="RUN_DIR")
    assert list(marker.parent.iterdir()) == [marker]


@pytest.mark.parametrize("kind", ["link", "fifo", "directory"])
def test_a_file_opened_by_name_must_be_a_regular_file(run, marker, kind):
    path = run / "epochs.jsonl"
    {"link": lambda: path.symlink_to(marker), "fifo": lambda: os.mkfifo(path), "directory": path.mkdir}[kind]()
    with Folder.open(run, label="RUN_DIR") as folder, pytest.raises(UnexpectedEntry, match="epochs.jsonl is a"):
        folder.open_file("epochs.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT)


def test_the_recorders_appends_and_summary_go_nowhere_else(run, marker):
    from theanompi.session.recorder import Recorder

    (run / "epochs.jsonl").symlink_to(marker)
    recorder = Recorder(run, write=True, warmup_iterations=0)
    with pytest.raises(UnexpectedEntry, match="epochs.jsonl is a symbolic link"):
        recorder.end_epoch(0, {})
    (run / "workers").symlink_to(marker.parent)
    with pytest.raises(UnexpectedEntry, match="run/workers is a symbolic link"):
        Recorder(run / "workers" / "worker-0", write=True, root=run)


def test_tensorboard_events_are_created_below_run_dir_without_links(run, marker):
    from theanompi.session.tensorboard import EventFile

    (run / "tensorboard").symlink_to(marker.parent)
    events = EventFile(run / "tensorboard", root=run)
    with pytest.raises(UnexpectedEntry, match="run/tensorboard is a symbolic link"):
        events.scalars(1, {"val/accuracy": 0.5})
    assert list(marker.parent.iterdir()) == [marker]


def test_rank_status_files_and_the_watchdogs_report(run, marker):
    from theanompi.session.rank_status import read_failures, write_status
    from theanompi.session.watchdog import Activity, Watchdog

    (run / "ranks").symlink_to(marker.parent)
    with pytest.raises(UnexpectedEntry, match="run/ranks is a symbolic link"):
        write_status(run, 0, "pid", "42")
    (run / "ranks").unlink()
    (run / "ranks").mkdir()
    (run / "ranks" / "rank-1.failed").symlink_to(marker)
    os.mkfifo(run / "ranks" / "rank-2.failed")
    assert read_failures(run) == []  # neither read through the link nor blocked on the FIFO
    activity = Activity()
    activity.state = ("training", "", False, time.time() - 10)
    (run / "ranks" / "rank-0.stall").symlink_to(marker)
    dog = Watchdog(0.2, run / "ranks" / "rank-0.stall", "rank 0", activity=activity, root=run)
    dog.start()
    deadline = time.time() + 10
    while time.time() < deadline and (run / "ranks" / "rank-0.stall").is_symlink():
        time.sleep(0.05)
    assert json.loads((run / "ranks" / "rank-0.stall").read_text())["who"] == "rank 0"


def test_checkpoints_latest_and_stale_temporaries(tmp_path, marker):
    from theanompi.session.checkpoint import remove_stale_temporaries, save_checkpoint

    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "latest").symlink_to(marker)
    (ckpts / temporary_path("latest", pid=1).name).symlink_to(marker)
    (ckpts / temporary_path("latest").name).symlink_to(marker)
    assert [p.name for p in remove_stale_temporaries(ckpts)] == [".latest.tmp1"]
    path = save_checkpoint(ckpts, {"epoch": 0, "rule": "BSP"}, root=tmp_path / "run")
    assert (ckpts / "latest").read_text() == f"{path.name}\n" and not (ckpts / "latest").is_symlink()
    (ckpts.parent / "elsewhere").symlink_to(marker.parent)
    with pytest.raises(UnexpectedEntry, match="elsewhere is a symbolic link"):
        save_checkpoint(ckpts.parent / "elsewhere", {"epoch": 1, "rule": "BSP"}, root=tmp_path / "run")


def test_records_are_set_aside_into_a_folder_the_session_made(run, marker):
    from theanompi.session.run_records import set_aside_records

    (run / "epochs.jsonl").symlink_to(marker)
    (run / "previous").symlink_to(marker.parent)
    with pytest.raises(UnexpectedEntry, match="run/previous is a symbolic link"):
        set_aside_records(run)
    (run / "previous").unlink()
    moved = set_aside_records(run)
    assert moved is not None and (moved / "epochs.jsonl").is_symlink() and moved.parent == run / "previous"


def test_records_are_trimmed_without_following_links(run, marker):
    from theanompi.session.run_records import trim_records

    (run / "epochs.jsonl").symlink_to(marker)
    with pytest.raises(UnexpectedEntry, match="epochs.jsonl is a symbolic link"):
        trim_records(run, {"epoch": 0, "iteration": 3})


def test_the_spec_replaces_a_link_at_its_name(run, marker):
    from theanompi.core.session_options import BSPOptions
    from theanompi.session.spec import SessionSpec

    (run / "session.json").symlink_to(marker)
    spec = SessionSpec(rule="BSP", devices=["cpu0"], modelfile="m", modelclass="M", options=BSPOptions())
    spec.save(run / "session.json")
    assert SessionSpec.load(run / "session.json", root=run) == spec


# ----- reading --------------------------------------------------------------------------------------------------------
def test_a_fifo_is_refused_at_once_never_read(tmp_path):
    os.mkfifo(tmp_path / "hosts")
    result: list[BaseException] = []
    reader = threading.Thread(target=lambda: result.append(pytest.raises(UnexpectedEntry, read_bounded,
                                                                         tmp_path / "hosts", 100, "--hostfile").value),
                              daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "blocked on the FIFO"
    assert str(result[0]) == f"--hostfile '{tmp_path}/hosts' is a FIFO (named pipe), not a regular file"


def test_a_device_or_a_link_to_one_is_refused(tmp_path):
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(UnexpectedEntry, match=r"^cfg file '.*/zero' is a character device \(a link to one\), not a "
                                              r"regular file$"):
        read_bounded(tmp_path / "zero", 1 << 20, "cfg file")
    with pytest.raises(UnexpectedEntry, match=r"zero is a symbolic link \(to /dev/zero\)"):
        read_bounded(tmp_path / "zero", 1 << 20, "records", root=tmp_path)


def test_a_link_to_a_regular_file_is_followed_only_where_the_user_named_it(tmp_path, marker):
    (tmp_path / "hosts").symlink_to(marker)
    assert read_bounded(tmp_path / "hosts", 100, "--hostfile") == MARKER
    with pytest.raises(UnexpectedEntry):
        read_bounded(tmp_path / "hosts", 100, "latest", root=tmp_path)


def test_a_file_beyond_its_limit_is_refused(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 101)
    assert read_bounded(tmp_path / "big", 101, "x") == b"x" * 101
    with pytest.raises(FileTooLarge, match=r"^--hostfile '.*/big' is larger than 100 bytes"):
        read_bounded(tmp_path / "big", 100, "--hostfile")


def test_records_are_read_line_by_line_and_an_overlong_line_is_skipped(tmp_path):
    (tmp_path / "epochs.jsonl").write_text('{"epoch": 0}\n' + "x" * 5000 + '\n{"epoch": 1}\n')
    assert list(bounded_lines(tmp_path / "epochs.jsonl", 1000, "records", root=tmp_path)) == ['{"epoch": 0}',
                                                                                            '{"epoch": 1}']


@pytest.mark.parametrize("reader", ["CIFAR-10 pickle", "MNIST .npz", "hickle batch", "mean file (.npy)"])
def test_a_data_file_that_is_a_fifo_is_refused_at_once(tmp_path, reader):
    """Data directories are the user's (their links are followed), but a FIFO or a device among the files is refused
    in one line, never read."""
    from theanompi.core.safe_load import NUMPY_ARRAY_GLOBALS, load_pickle, read_array, read_hickle
    from theanompi.models.data.mnist import _load_npz

    path = tmp_path / {"MNIST .npz": "mnist.npz", "mean file (.npy)": "mean.npy"}.get(reader, "data_batch_1")
    os.mkfifo(path)
    read = {"CIFAR-10 pickle": lambda: load_pickle(path, NUMPY_ARRAY_GLOBALS, what="CIFAR-10 file"),
            "MNIST .npz": lambda: _load_npz(path), "hickle batch": lambda: read_hickle(path),
            "mean file (.npy)": lambda: read_array(path, "mean file")}[reader]
    done: list[BaseException] = []
    thread = threading.Thread(target=lambda: done.append(pytest.raises(UnexpectedEntry, read).value), daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "blocked on the FIFO"
    assert "is a FIFO (named pipe), not a regular file" in str(done[0])


def test_a_rank_on_another_host_makes_its_run_dir_where_it_is_missing(tmp_path):
    """RUN_DIR need not be shared: a rank on another host writes its status and records into a RUN_DIR of its own
    host, made with its parents (the root is the user's path; below it, nothing is followed)."""
    from theanompi.session.rank_status import write_status
    from theanompi.session.recorder import Recorder

    run = tmp_path / "not" / "there"
    write_status(run, 3, "pid", "42")
    recorder = Recorder(tmp_path / "other" / "workers" / "worker-1", write=True, root=tmp_path / "other")
    recorder.end_epoch(0, {})
    assert (run / "ranks" / "rank-3.pid").read_text() == "42\n"
    assert (tmp_path / "other" / "workers" / "worker-1" / "epochs.jsonl").is_file()


def test_the_elastic_launchers_stop_files_and_restart_records_go_nowhere_else(run, marker):
    """Issue 37's files, routed through no_follow: ``ranks/stop.request``, ``ranks/stopped.json``,
    ``restarts.jsonl`` and the launcher's rewrite of ``summary.json``."""
    from types import SimpleNamespace

    from theanompi.launch.elastic import ElasticRun
    from theanompi.session.rank_status import read_stopped, request_stop, stop_requested, write_stopped

    (run / "ranks").symlink_to(marker.parent)
    with pytest.raises(UnexpectedEntry, match="run/ranks is a symbolic link"):
        request_stop(run, "grow")
    assert not stop_requested(run) and read_stopped(run) is None  # nothing read through the link
    (run / "ranks").unlink()
    (run / "ranks").mkdir()
    (run / "ranks" / "stop.request").symlink_to(marker)
    assert not stop_requested(run)  # a link asks nothing
    request_stop(run, "grow to 3 workers")  # replaces the link, never writes through it
    assert stop_requested(run) and not (run / "ranks" / "stop.request").is_symlink()
    (run / "ranks" / "stopped.json").symlink_to(marker)
    assert read_stopped(run) is None
    write_stopped(run, {"checkpoint": "c.hkl"})
    assert read_stopped(run) == {"checkpoint": "c.hkl"}
    (run / "ranks" / "stopped.json").unlink()
    os.mkfifo(run / "ranks" / "stopped.json")
    assert read_stopped(run) is None  # not blocked on the FIFO

    elastic = SimpleNamespace(spec=SimpleNamespace(run_dir=str(run)), restarts=[{"reason": "lost"}])
    (run / "restarts.jsonl").symlink_to(marker)
    ElasticRun._record(elastic, {"reason": "lost"})  # refused, said in a warning: never appended through
    (run / "restarts.jsonl").unlink()
    ElasticRun._record(elastic, {"reason": "lost"})
    ElasticRun._record(elastic, {"reason": "grow"})
    assert [json.loads(line)["reason"] for line in (run / "restarts.jsonl").read_text().splitlines()] == [
        "lost", "grow"]
    (run / "summary.json").symlink_to(marker)
    ElasticRun._add_restarts_to_summary(elastic)  # not read through the link, nothing written
    assert (run / "summary.json").is_symlink()
    (run / "summary.json").unlink()
    os.mkfifo(run / "summary.json")
    ElasticRun._add_restarts_to_summary(elastic)  # not blocked on the FIFO
    (run / "summary.json").unlink()
    (run / "summary.json").write_text(json.dumps({"val_error": 0.1}))
    ElasticRun._add_restarts_to_summary(elastic)
    assert json.loads((run / "summary.json").read_text()) == {"val_error": 0.1, "restarts": [{"reason": "lost"}]}


def test_the_background_checkpoint_writer_writes_below_its_root_without_links(run, marker):
    """Issue 37's CheckpointWriter writes with the root the ranks give it (``owning_root``): a link planted at
    ``RUN_DIR/checkpoints`` is refused (raised at the next wait), never written through; mid-epoch checkpoints past
    the newest two are removed by name in the folder reached without links."""
    from theanompi.session.checkpoint_writer import CheckpointWriter
    from theanompi.session.run_dir import owning_root

    directory = run / "checkpoints"
    directory.symlink_to(marker.parent)
    writer = CheckpointWriter(directory, root=owning_root(str(directory), str(run)))
    payload = {"rule": "BSP", "epoch": 0, "iteration": 4, "n_workers": 1, "worker_params": [[]], "worker_state": [[]]}
    writer.save(payload)
    with pytest.raises(UnexpectedEntry, match="checkpoints is a symbolic link"):
        writer.wait()
    directory.unlink()
    for units in (10, 20, 30):
        writer.save({**payload, "epoch_units": units})
    assert writer.wait() == directory / "ckpt-epoch-0001-at-000000030.hkl"
    assert sorted(p.name for p in directory.iterdir() if p.name.startswith("ckpt")) == [
        "ckpt-epoch-0001-at-000000020.hkl", "ckpt-epoch-0001-at-000000030.hkl"]
