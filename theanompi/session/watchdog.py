"""Stall detection: a rank that makes no progress for ``WATCHDOG`` seconds is named, and the launcher stops the session.

Every rank process has one :data:`ACTIVITY`: the phase it is in (building the
model, training, validation, epoch end, serving, ...), whether it is waiting on
other ranks (an exchange, a collective) or working itself, and since when.
Phases are entered by the rank loops (:meth:`Activity.enter`); the recorder's
timers and :meth:`Activity.waiting` mark progress inside them. A
:class:`Watchdog` thread, started by ``theanompi.rules.rank_main`` before the rule runs
(so servers and the model build are covered too), writes
``RUN_DIR/ranks/rank-N.stall`` once nothing has moved for ``WATCHDOG`` seconds.
The launcher (:func:`stall_report`) turns those files into one line that names
the stuck ranks first (those not waiting on anyone), then the ones waiting.

Example
-------
>>> activity = Activity()
>>> activity.enter("validation")
>>> with activity.waiting("an exchange"):
...     activity.describe()[:2]
('validation (an exchange)', True)
>>> activity.describe()[:2]
('validation', False)
>>> Watchdog(timeout=60, path=rank_status.status_path(run_dir, 1, "stall"),
...          who="rank 1 (worker on cpu1)").start()       # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from theanompi.core.safe_io import atomic_write_text
from theanompi.session.rank_status import has_status, read_stalls


class Activity:
    """What this process does now: (phase, detail, waiting on other ranks?, since when), replaced atomically."""

    def __init__(self) -> None:
        self.state: tuple[str, str, bool, float] = ("starting", "", False, time.time())
        self.iteration = 0

    def enter(self, phase: str) -> None:
        """A new phase of the rank's work starts now."""
        self.state = (phase, "", False, time.time())

    def progress(self, detail: str = "", waiting: bool = False) -> None:
        """Something moved inside the current phase; ``detail`` says what the rank does next."""
        self.state = (self.state[0], detail, waiting, time.time())

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """The block waits on other ranks (an exchange, a collective): it does not blame this rank."""
        self.progress(what, waiting=True)
        try:
            yield
        finally:
            self.progress()

    def describe(self) -> tuple[str, bool, float]:
        """(phase with detail, waiting?, since)."""
        phase, detail, waiting, since = self.state
        return (f"{phase} ({detail})" if detail else phase), waiting, since


#: the activity of this process (one rank per process)
ACTIVITY = Activity()
#: phases that import and compile the model: they may take minutes, and get their own limit
BUILD_PHASES = ("starting", "building the model")


class Watchdog(threading.Thread):
    """Writes ``path`` (JSON: who, where, waiting, since, iteration) once ``activity`` stalls ``timeout``
    seconds (``build_timeout`` in the :data:`BUILD_PHASES`; default ``timeout``)."""

    def __init__(self, timeout: float, path: Path, who: str, activity: Activity = ACTIVITY,
                 build_timeout: float | None = None, root: Path | None = None):
        super().__init__(name="theanompi-watchdog", daemon=True)
        self.timeout = float(timeout)
        self.build_timeout = float(build_timeout or timeout)
        self.path = Path(path)
        #: RUN_DIR: the report is written below it without following a link (default: its own folder)
        self.root = root
        self.who = who
        self.activity = activity
        self.reported_since: float | None = None

    def run(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4, self.build_timeout / 4))
            phase = self.activity.state[0]
            where, waiting, since = self.activity.describe()
            if self.reported_since is not None and since != self.reported_since:
                self.path.unlink(missing_ok=True)  # it moved again: the report is no longer true
                self.reported_since = None
            limit = self.build_timeout if phase in BUILD_PHASES else self.timeout
            if since == self.reported_since or time.time() - since < limit:
                continue
            record = {"who": self.who, "where": where, "waiting": waiting, "since": since,
                      "iteration": int(self.activity.iteration)}
            try:
                atomic_write_text(self.path, json.dumps(record), root=self.root, label="RUN_DIR")
            except (OSError, ValueError):  # a full or read-only disk, a link (a ConfigError): the rank's error says it
                continue
            self.reported_since = since


def stall_report(run_dir: Path, describe_ranks: list[str]) -> str | None:
    """One line naming stuck ranks, then waiting ones, then silent ones; None while the session may go on.

    The session is stalled when a rank is stuck in its own work, or when every rank that has not
    finished waits on the others (a rank that waits while a silent one still works is not a stall:
    e.g. a server idle while its workers validate).

    Example
    -------
    >>> import json, tempfile, time
    >>> from theanompi.session.rank_status import write_status
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = write_status(d, 1, "stall", json.dumps({"who": "rank 1", "where": "training", "waiting": False,
    ...                                             "since": time.time() - 5, "iteration": 2}))
    >>> stall_report(d, ["rank 0", "rank 1"])
    'stalled: rank 1 is stuck in training for 5 s at iteration 2; not reporting (slow, or stuck too): rank 0'
    """
    done = {r for r in range(len(describe_ranks)) if has_status(run_dir, r, "done")}
    stalls = {r: s for r, s in read_stalls(run_dir).items() if r not in done}  # done: only leaving MPI
    if not stalls:
        return None
    now = time.time()
    longest_first = sorted(stalls.items(), key=lambda item: (item[1]["since"], item[0]))
    stuck = [f"{s['who']} is stuck in {s['where']} for {now - s['since']:.0f} s at iteration {s['iteration']}"
             for _, s in longest_first if not s.get("waiting")]
    waiting = [f"{s['who']} has waited {now - s['since']:.0f} s in {s['where']} at iteration {s['iteration']}"
               for _, s in sorted(stalls.items()) if s.get("waiting")]
    running = [r for r in range(len(describe_ranks)) if r not in done]
    if not stuck and any(r not in stalls for r in running):
        return None
    silent = [describe_ranks[r] for r in running if r not in stalls]
    if stuck:
        parts = stuck + waiting
        rest = f"; not reporting (slow, or stuck too): {', '.join(silent)}" if silent else ""
        return f"stalled: {'; '.join(parts)}{rest}"
    rest = f"; not waiting (stuck elsewhere or slow): {', '.join(silent)}" if silent else ""
    return f"stalled exchange: {'; '.join(waiting)}{rest}"
