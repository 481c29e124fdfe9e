"""The restart loop of an elastic session (theanompi.launch.elastic) on stand-in sessions: every wait bounded, the
loop gives up after MAX_RESTARTS or without MIN_WORKERS, a session grows when more workers are offered. Real
processes: tests/sessions/test_elastic.py."""

from __future__ import annotations

import json
import threading

import pytest

from theanompi.core.devices import parse_devices
from theanompi.core.session_options import BSPOptions
from theanompi.launch import elastic
from theanompi.launch.discovery import DeviceSource
from theanompi.launch.losses import Loss
from theanompi.session.rank_status import clear_statuses, stop_requested, write_stopped
from theanompi.session.spec import SessionSpec


class FakeRun:
    """A session that ends with ``code`` (a lost worker when ``lost_device``), once ``release`` is set."""

    def __init__(self, code=0, lost_device=None, release=None, on_wait=None):
        self.code, self.lost_device, self.release, self.on_wait = code, lost_device, release, on_wait
        self.failure = f"rank 1 (worker on {lost_device}) died" if lost_device else None
        self.lost: list[str] = []

    def wait(self):
        if self.release is not None:
            assert self.release.wait(10)
        if self.on_wait is not None:
            self.on_wait()
        return self.code

    def remote_ends(self):
        return []


@pytest.fixture
def loop(tmp_path, monkeypatch):
    """(make(runs, devices, **options) -> ElasticRun, the specs it started): sessions taken from ``runs`` in turn."""
    started: list[SessionSpec] = []

    def make(runs, devices="cpu0,cpu1,cpu2", source=None, **options):
        queue = list(runs)
        spec = SessionSpec(rule="BSP", devices=parse_devices(devices) and devices.split(","), modelfile="m",
                           modelclass="C", options=BSPOptions(run_dir=str(tmp_path), checkpoint_dir=str(tmp_path),
                                                              **options), cwd=str(tmp_path))

        def replan(self, chosen, resume):
            planned = SessionSpec(rule="BSP", devices=[str(d) for d in chosen], modelfile="m", modelclass="C",
                                  options=spec.options, cwd=str(tmp_path))
            return planned, []

        def start(planned, ranks):  # as start_session does: the new session's status files start empty
            clear_statuses(tmp_path)
            started.append(planned)
            return queue.pop(0)

        monkeypatch.setattr(elastic.ElasticRun, "_replan", replan)
        monkeypatch.setattr(elastic, "start_session", start)
        monkeypatch.setattr(elastic, "MpiexecRun", FakeRun)
        monkeypatch.setattr(elastic, "checkpoint_point", lambda resume: {"checkpoint": None, "epoch": 1,
                                                                         "epoch_units": 0, "iteration": 0})
        monkeypatch.setattr(elastic, "membership_loss", lambda run: Loss(
            ranks=[1], hosts=[], devices=parse_devices(run.lost_device), reason=run.failure)
            if run.lost_device else None)
        return elastic.ElasticRun(spec, [], queue.pop(0), source or DeviceSource.fixed(parse_devices(devices)))

    return make, started


def test_a_lost_worker_restarts_on_the_others_until_max_restarts_then_one_line(loop):
    make, started = loop
    run = make([FakeRun(137, "cpu1"), FakeRun(137, "cpu2"), FakeRun(137, "cpu0")], max_restarts=2, min_workers=1)
    assert run.wait() == 137
    assert [s.devices for s in started] == [["cpu0", "cpu2"], ["cpu0"]]
    assert run.failure == "rank 1 (worker on cpu0) died; gave up: MAX_RESTARTS=2 restart(s) used"
    assert [(r["workers_before"], r["workers_after"]) for r in run.restarts] == [(3, 2), (2, 1)]


def test_too_few_workers_wait_elastic_wait_and_give_up_naming_what_is_left_out(loop):
    make, _ = loop
    now = [0.0]
    run = make([FakeRun(137, "cpu1")], max_restarts=3, elastic_wait=5, elastic_cooldown=60)
    run.clock = run.membership.clock = lambda: now[0]
    run.sleep = lambda s: now.__setitem__(0, now[0] + s)  # this loop's waits only (other threads keep time.sleep)
    assert run.wait() == 137
    assert now[0] == 5.0  # waited ELASTIC_WAIT, no longer
    assert run.failure == ("rank 1 (worker on cpu1) died; gave up: 2 worker(s) available after waiting 5 s "
                           "(ELASTIC_WAIT), fewer than MIN_WORKERS=3; left out: cpu1 (55 s more)")


def test_a_device_back_from_its_cooldown_within_elastic_wait_restarts_with_every_worker(loop):
    make, started = loop
    now = [0.0]
    run = make([FakeRun(137, "cpu1"), FakeRun(0)], max_restarts=1, elastic_wait=10, elastic_cooldown=3)
    run.clock = run.membership.clock = lambda: now[0]
    run.sleep = lambda s: now.__setitem__(0, now[0] + s)  # this loop's waits only (other threads keep time.sleep)
    assert run.wait() == 0 and run.failure is None
    assert [s.devices for s in started] == [["cpu0", "cpu1", "cpu2"]] and now[0] == 3.0


def test_a_session_asked_to_stop_at_a_checkpoint_grows_to_what_discovery_offers(loop, monkeypatch, tmp_path):
    make, started = loop
    monkeypatch.setattr(elastic, "GROW_POLL_S", 0.05)
    offered = [parse_devices("cpu0,cpu1")]
    source = DeviceSource("HOST_DISCOVERY=d.sh", lambda: offered[0])
    release = threading.Event()

    def stop_as_asked():  # the ranks: a checkpoint, then stop as asked
        assert stop_requested(tmp_path)
        write_stopped(tmp_path, {"checkpoint": "c.hkl", "iteration": 9})

    run = make([FakeRun(0, release=release, on_wait=stop_as_asked), FakeRun(0)], devices="cpu0,cpu1",
               source=source, max_workers=3)
    offered[0] = parse_devices("cpu0,cpu1,cpu2,cpu3")  # 4 offered, MAX_WORKERS=3
    threading.Timer(1.0, release.set).start()
    assert run.wait() == 0
    assert [s.devices for s in started] == [["cpu0", "cpu1", "cpu2"]]
    (entry,) = run.restarts
    assert (entry["reason"], entry["failure"]) == ("grow", "HOST_DISCOVERY=d.sh offers 3 workers (the session has 2)")
    assert json.loads((tmp_path / "restarts.jsonl").read_text())["workers_after"] == 3


def test_a_failure_that_is_no_loss_ends_the_session_as_before(loop):
    make, started = loop
    failing = FakeRun(1)
    failing.failure = "rank 0 (worker on cpu0): ValueError: boom"
    run = make([failing], max_restarts=5)
    assert run.wait() == 1 and run.failure == "rank 0 (worker on cpu0): ValueError: boom" and started == []
