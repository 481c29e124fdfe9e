"""Stall detection: a rank waiting too long in one exchange is reported, and the launcher stops the session.

Each rank runs a :class:`Watchdog` thread that looks once a second at its
recorder's ``comm_since`` (set while the rank is inside an exchange). After
``WATCHDOG`` seconds in one exchange it writes ``RUN_DIR/ranks/rank-N.stall``
(who, since when, at which iteration). The launcher (:func:`stall_report`)
turns those files into one line naming the waiting ranks and the ones that
never arrived, then ends every rank.

Example
-------
>>> Watchdog(recorder, timeout=60, status_dir=run_dir / "ranks", rank=1, who="rank 1 (worker on cpu1)",
...          iteration=lambda: loop.iteration).start()       # doctest: +SKIP
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class Watchdog(threading.Thread):
    def __init__(self, recorder, timeout: float, status_dir: Path, rank: int, who: str, iteration):
        super().__init__(name="theanompi-watchdog", daemon=True)
        self.recorder, self.timeout = recorder, float(timeout)
        self.path = Path(status_dir) / f"rank-{rank}.stall"
        self.who, self.iteration = who, iteration
        self.reported_since = None

    def run(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout / 4))
            since = self.recorder.comm_since
            if since is None or since == self.reported_since:
                continue
            waited = time.time() - since
            if waited >= self.timeout:
                record = {"who": self.who, "since": since, "iteration": int(self.iteration())}
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(record))
                tmp.replace(self.path)
                self.reported_since = since


def stall_report(status_dir: Path, describe_ranks: list[str]) -> str | None:
    """One line naming waiting ranks and silent ones, or None if no rank reported a stall."""
    stalls = {}
    for path in Path(status_dir).glob("rank-*.stall"):
        try:
            stalls[int(path.stem.split("-")[1])] = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
    if not stalls:
        return None
    now = time.time()
    waiting = "; ".join(f"{s['who']} has waited {now - s['since']:.0f} s in an exchange at iteration {s['iteration']}"
                        for _, s in sorted(stalls.items()))
    silent = [d for r, d in enumerate(describe_ranks) if r not in stalls]
    rest = f"; not waiting (stuck elsewhere or slow): {', '.join(silent)}" if silent else ""
    return f"stalled exchange: {waiting}{rest}"
