"""Elastic sessions: a session that restarts from its newest checkpoint when it loses a worker or a host, and grows
when more workers become available -- a loop *above* the one-session run (:func:`theanompi.launch.plan.start_session`
and its :class:`~theanompi.launch.mpiexec.MpiexecRun`, which it starts again and again).

On with ``MAX_RESTARTS=n`` (n > 0) or ``HOST_DISCOVERY=script``. Every restart is the same path, whatever the rule:

1. the session ends: a worker was killed, a host was lost (its connections closed, or it went silent for WATCHDOG
   seconds: :class:`theanompi.session.remote.RemoteRanks`), the launcher ends what is left of it
   (:class:`~theanompi.launch.mpiexec.MpiexecRun`) and finds what was lost (:func:`membership_loss`); a rank that
   failed of itself, a stall or Ctrl-C end the session as they always do;
2. the lost devices and hosts are left out for ELASTIC_COOLDOWN seconds (:class:`Membership`), the allocation is read
   again (:class:`DeviceSource`: the discovery script, else the hostfile, Slurm or PBS allocation the session started
   from, else DEVICES) and the devices chosen: those that survive in their order, then new ones, this host's first,
   at most MAX_WORKERS workers;
3. with fewer than MIN_WORKERS workers it waits up to ELASTIC_WAIT seconds for more, then ends with one line; after
   MAX_RESTARTS restarts the next loss ends it with one line;
4. the session is planned again on those devices (:func:`theanompi.launch.plan.plan_session`) with ``RESUME`` =
   its newest intact checkpoint, which adapts everything a new number of workers changes
   (:mod:`theanompi.launch.resume_plan`, and the ranks' per-rule restore), and started; one console line and an
   entry of ``summary.json["restarts"]`` (and ``RUN_DIR/restarts.jsonl``, written as it happens) say what happened;
   rank 0 marks it in the TensorBoard events.

Growing: while the session runs, the launcher reads the allocation every :data:`GROW_POLL_S` seconds; when it offers
more workers than the session has (up to MAX_WORKERS; a device back from its cooldown counts), it asks the session
to stop at its next checkpoint (:func:`theanompi.session.rank_status.request_stop`), which writes the checkpoint
and stops there; the launcher then restarts it with the larger set, saying so. Growing does not count against
MAX_RESTARTS (as torchrun's scale-up does not).

Every wait is bounded: the discovery script (its time limit), the wait for workers (ELASTIC_WAIT), a lost host
(WATCHDOG), the end of a session (:meth:`MpiexecRun.terminate`'s grace).

Example
-------
>>> elastic_enabled(SessionOptions(max_restarts=2)), elastic_enabled(SessionOptions())
(True, False)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from theanompi.core.devices import Device, parse_devices
from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import read_bounded
from theanompi.core.safe_io import append_lines, atomic_write_text
from theanompi.core.session_options import SessionOptions
from theanompi.launch.discovery import DeviceSource, Membership, device_key
from theanompi.launch.losses import Loss, membership_loss
from theanompi.launch.mpiexec import MpiexecRun, exit_code_of, interrupted_line
from theanompi.launch.plan import SessionRequest, SessionRun, plan_session, start_session
from theanompi.rules import get_rule
from theanompi.rules.base import Rule
from theanompi.session.checkpoint import checkpoints_newest_first, load_newest_intact, resume_position
from theanompi.session.rank_status import read_stopped, request_stop
from theanompi.session.spec import RankSpec, SessionSpec
from theanompi.session.tensorboard import SUMMARY_LIMIT

log = logging.getLogger(__name__)

#: seconds between two looks at the allocation while a session runs (growing)
GROW_POLL_S = 2.0
#: the record of restarts in RUN_DIR, one JSON line each, appended as they happen
RESTARTS_FILE = "restarts.jsonl"


def elastic_enabled(options: SessionOptions) -> bool:
    """Whether a session restarts on a membership change or grows (MAX_RESTARTS > 0 or HOST_DISCOVERY)."""
    return options.max_restarts > 0 or options.host_discovery is not None


class ElasticRun:
    """A session that restarts (see the module's docstring); a :class:`~theanompi.launch.plan.SessionRun`.

    Constructed with its first session already started (:meth:`start` starts it); :meth:`wait` runs the loop.
    """

    def __init__(self, spec: SessionSpec, ranks: list[RankSpec], first: SessionRun, source: DeviceSource,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.first_spec = spec
        self.spec, self.ranks, self.current = spec, ranks, first
        self.options = spec.options
        self.rule = get_rule(spec.rule)
        self.source = source
        self.membership = Membership(source.read, spec.options.elastic_cooldown, clock=clock)
        self.clock, self.sleep = clock, sleep
        self.min_workers = spec.options.min_workers or self.workers(parse_devices(spec.devices))
        #: the restarts so far (summary.json's "restarts")
        self.restarts: list[dict[str, Any]] = []
        #: why the running session was asked to stop at its next checkpoint: ('grow' or 'shrink', in words)
        self.planned: tuple[str, str] = ("grow", "")
        self.code: int | None = None
        self.failure: str | None = None
        self.lost: list[str] = []

    @classmethod
    def start(cls, spec: SessionSpec, ranks: list[RankSpec], source: DeviceSource | None = None) -> ElasticRun:
        """Start the first session of an elastic run; ``source``: where restarts find devices (default:
        HOST_DISCOVERY if given, else the session's DEVICES)."""
        if source is None:
            source = default_source(spec)
        if not (spec.options.checkpoint_every or spec.options.checkpoint_every_iters):
            log.warning("MAX_RESTARTS/HOST_DISCOVERY without CHECKPOINT_EVERY or CHECKPOINT_EVERY_ITERS: a restart "
                        "starts the training over")
        return cls(spec, ranks, start_session(spec, ranks), source)

    # ----- the SessionRun protocol ---------------------------------------------------------
    def remote_ends(self) -> list[str]:
        return self.current.remote_ends()

    def wait(self) -> int:
        """Run sessions until one ends for good; its exit code (0: trained, with ``summary.json["restarts"]``)."""
        try:
            code = self._loop()
        except KeyboardInterrupt as err:  # Ctrl-C while no session runs (between two, or waiting for workers)
            self.failure = interrupted_line(err, "between restarts")
            code = exit_code_of(err)
        self.code = code
        return code

    # ----- the loop ----------------------------------------------------------------------
    def _loop(self) -> int:
        while True:
            code = self._wait_current()
            stopped = read_stopped(self.spec.run_dir) if code == 0 else None
            if code == 0 and stopped is None:
                self.lost, self.failure = self.current.lost, None
                self._add_restarts_to_summary()
                return 0
            if stopped is not None:  # it stopped at a checkpoint, as asked, to grow or shrink
                devices = self._wait_for_workers() or parse_devices(self.spec.devices)
                if not self._restart(self.planned[0], devices, None):
                    return 1
                continue
            loss = membership_loss(self.current) if isinstance(self.current, MpiexecRun) else None
            self.failure = self.current.failure
            if loss is None:
                return code
            failures = sum(1 for r in self.restarts if r["reason"] == "lost")
            if failures >= self.options.max_restarts:
                self.failure = (f"{loss.reason}; gave up: MAX_RESTARTS={self.options.max_restarts} restart(s) "
                                "used" if self.options.max_restarts else loss.reason)
                return code
            self.membership.fail(loss.devices, loss.hosts)
            enough = self._wait_for_workers()
            if enough is None:
                n = self.workers(self._choose(self.membership.available()))
                cooling = self.membership.left_out()
                self.failure = (f"{loss.reason}; gave up: {n} worker(s) available after waiting "
                                f"{self.options.elastic_wait:.0f} s (ELASTIC_WAIT), fewer than MIN_WORKERS="
                                f"{self.min_workers}" + (f"; left out: {', '.join(cooling)}" if cooling else ""))
                return code
            if not self._restart("lost", enough, loss):
                return 1

    def _wait_current(self) -> int:
        """Wait for the running session, asking it to stop at its next checkpoint when more workers are available."""
        done = threading.Event()
        watcher = threading.Thread(target=self._watch_for_growth, args=(done,), name="theanompi-grow", daemon=True)
        watcher.start()
        try:
            return self.current.wait()
        finally:
            done.set()
            watcher.join(timeout=5)

    def _watch_for_growth(self, done: threading.Event) -> None:
        """Every GROW_POLL_S: when the allocation offers more workers than the session has, or no longer offers
        some of its devices (a host taken away with notice) while still MIN_WORKERS, ask the session to stop at its
        next checkpoint (once) to restart on what is offered."""
        current = parse_devices(self.spec.devices)
        have, have_keys = self.workers(current), {device_key(d) for d in current}
        while not done.wait(GROW_POLL_S):
            chosen = self._choose(self.membership.available())
            offered, keys = self.workers(chosen), {device_key(d) for d in chosen}
            gone = [d for d in current if device_key(d) not in keys]
            if keys == have_keys:
                continue
            if offered > have:
                self.planned = "grow", f"{self.source.describe} offers {offered} workers (the session has {have})"
            elif gone and offered >= self.min_workers:
                self.planned = "shrink", f"{self.source.describe} no longer offers {devices_value(gone)}"
            else:
                continue
            request_stop(self.spec.run_dir, self.planned[1])
            log.info("%s: the session stops at its next checkpoint to restart with %d workers", self.planned[1],
                     offered)
            return

    def _wait_for_workers(self) -> list[Device] | None:
        """The devices of the restart, once they give MIN_WORKERS workers; None after ELASTIC_WAIT seconds."""
        deadline = self.clock() + self.options.elastic_wait
        while True:
            devices = self._choose(self.membership.available())
            if self.workers(devices) >= self.min_workers:
                return devices
            left = deadline - self.clock()
            if left <= 0:
                return None
            self.sleep(min(1.0, left))

    # ----- choosing devices --------------------------------------------------------------
    def workers(self, devices: list[Device]) -> int:
        """Workers the rule runs on ``devices`` (EASGD: one fewer, its server takes the first)."""
        if not devices:
            return 0
        return sum(1 for r in self.rule.launch_ranks(devices, self.options) if r.role == "worker")

    def _choose(self, available: list[Device]) -> list[Device]:
        """The session's devices that are still available, in their order, then the new ones; this host's first;
        at most MAX_WORKERS workers."""
        offered = {device_key(d): d for d in available}
        old = [device_key(d) for d in parse_devices(self.spec.devices)]
        chosen = [offered[k] for k in old if k in offered] + [d for k, d in offered.items() if k not in old]
        chosen.sort(key=lambda d: not d.is_local)  # rank 0 (records, checkpoints) on this host
        while self.options.max_workers and self.workers(chosen) > self.options.max_workers:
            chosen.pop()
        return chosen

    # ----- restarting ----------------------------------------------------------------------
    def _newest_checkpoint(self) -> str | None:
        """What the restart resumes: the session's newest intact checkpoint, else the RESUME it started from."""
        directory = self.options.checkpoint_dir
        if directory and checkpoints_newest_first(directory):
            return str(directory)
        return self.first_spec.options.resume

    def _restart(self, reason: str, devices: list[Device], loss: Loss | None) -> bool:
        """Plan the session again on ``devices`` from the newest checkpoint and start it; False (the failure said)
        when it cannot be planned."""
        before = self.workers(parse_devices(self.spec.devices))
        resume = self._newest_checkpoint()
        try:
            spec, ranks = self._replan(devices, resume)
            point = checkpoint_point(spec.options.resume)
        except ConfigError as err:
            self.failure = f"{loss.reason + '; ' if loss else ''}the restart cannot be planned: {err}"
            return False
        entry = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "unix_time": round(time.time(), 3),
                 "reason": reason,
                 "failure": loss.reason if loss else self.planned[1], "lost_ranks": loss.ranks if loss else [],
                 "lost_hosts": loss.hosts if loss else [], "workers_before": before,
                 "workers_after": self.workers(devices), "devices": devices_value(devices), **point}
        spec.restart = entry
        self.restarts.append(entry)
        self._record(entry)
        failures = sum(1 for r in self.restarts if r["reason"] == "lost")
        log.info("%s", restart_line(entry, failures, self.options.max_restarts))
        self.spec, self.ranks = spec, ranks
        self.current = start_session(spec, ranks)
        return True

    def _replan(self, devices: list[Device], resume: str | None) -> tuple[SessionSpec, list[RankSpec]]:
        first = self.first_spec
        request = SessionRequest(rule=self.rule, devices=devices_value(devices), modelfile=first.modelfile,
                                 modelclass=first.modelclass, options=first.options.replace(resume=resume),
                                 model_options=dict(first.model_options), cwd=first.cwd)
        return plan_session(request)

    def _record(self, entry: dict[str, Any]) -> None:
        """Append the restart to RUN_DIR/restarts.jsonl (the record a killed launcher still leaves)."""
        path = Path(self.spec.run_dir) / RESTARTS_FILE
        try:
            append_lines(path, [json.dumps(entry) + "\n"], root=self.spec.run_dir, label="RUN_DIR")
        except OSError as err:  # a full disk
            log.warning("the restart could not be recorded in %s: %s", path, err.strerror or err)
        except ValueError as err:  # a link, a FIFO or a device there (UnexpectedEntry): never written through
            log.warning("the restart could not be recorded: %s", err)

    def _add_restarts_to_summary(self) -> None:
        """summary.json (rank 0's, on this host) gets the session's restarts."""
        path = Path(self.spec.run_dir) / "summary.json"
        try:
            summary = json.loads(read_bounded(path, SUMMARY_LIMIT, "summary", root=self.spec.run_dir,
                                              label="RUN_DIR"))
        except (OSError, ValueError):  # missing, a link, a FIFO, too large, not JSON: left as it is
            return
        if isinstance(summary, dict):
            summary["restarts"] = self.restarts
            atomic_write_text(path, json.dumps(summary, indent=2), root=self.spec.run_dir, label="RUN_DIR")


def within_max_workers(rule: type[Rule], devices: Any, options: SessionOptions) -> str:
    """``devices`` (a DEVICES value) less its last devices while the rule would run more than MAX_WORKERS workers.

    >>> from theanompi.rules import EASGD
    >>> within_max_workers(EASGD, "cpu0,cpu1,cpu2,cpu3", SessionOptions(max_workers=2))
    'cpu0,cpu1,cpu2'
    """
    chosen = parse_devices(devices)
    while options.max_workers and sum(r.role == "worker" for r in rule.launch_ranks(chosen, options)) > \
            options.max_workers:
        chosen.pop()
    return devices_value(chosen)


def devices_value(devices: list[Device]) -> str:
    """A DEVICES value of ``devices``, grouped by host in order of first appearance.

    >>> devices_value(parse_devices("cpu0;node2:cpu0;cpu2;node2:cpu1"))
    'cpu0,cpu2;node2:cpu0,cpu1'
    """
    groups: dict[str, list[str]] = {}
    for device in devices:
        groups.setdefault(device.host, []).append(f"{device.kind}{device.index}")
    return ";".join(f"{host + ':' if host else ''}{','.join(names)}" for host, names in groups.items())


def default_source(spec: SessionSpec) -> DeviceSource:
    """HOST_DISCOVERY (with the kind of device the session started on) if given, else the session's DEVICES."""
    devices = parse_devices(spec.devices)
    script = spec.options.host_discovery
    if script is not None:
        return DeviceSource.discovery(script, spec.cwd, "cuda" if devices and devices[0].is_cuda else "cpu")
    return DeviceSource.fixed(devices)


def checkpoint_point(resume: str | None) -> dict[str, Any]:
    """Where a restart resumes: the checkpoint's path, the epoch it continues (from 1), the samples of it already
    trained, and the iteration (nothing: it starts over)."""
    if not resume:
        return {"checkpoint": None, "epoch": 1, "epoch_units": 0, "iteration": 0}
    path, payload = load_newest_intact(resume)
    epoch, units = resume_position(payload)
    return {"checkpoint": str(path), "epoch": epoch + 1, "epoch_units": units, "iteration": int(payload["iteration"])}


def restart_line(entry: dict[str, Any], number: int, max_restarts: int) -> str:
    """The console line of a restart (``number``: restarts after a loss so far, this one included).

    >>> restart_line({"reason": "lost", "failure": "rank 1 (worker on cpu1) died (mpiexec exit code 137)",
    ...               "workers_before": 3, "workers_after": 2, "devices": "cpu0,cpu2", "checkpoint": "c/ckpt.hkl",
    ...               "epoch": 2, "epoch_units": 300, "iteration": 52}, 1, 3)
    'restart 1 of MAX_RESTARTS=3: rank 1 (worker on cpu1) died (mpiexec exit code 137); resuming from c/ckpt.hkl \
(epoch 2 at sample 300, iteration 52) with 2 workers (was 3): cpu0,cpu2'
    """
    if entry["checkpoint"]:
        at = f" at sample {entry['epoch_units']}" if entry["epoch_units"] else ""
        where = f"resuming from {entry['checkpoint']} (epoch {entry['epoch']}{at}, iteration {entry['iteration']})"
    else:
        where = "no checkpoint yet: starting over"
    if entry["reason"] == "lost":
        what = f"restart {number} of MAX_RESTARTS={max_restarts}: {entry['failure']}"
    else:
        what = f"{'growing' if entry['reason'] == 'grow' else 'shrinking'}: {entry['failure']}"
    return f"{what}; {where} with {entry['workers_after']} workers (was {entry['workers_before']}): {entry['devices']}"
