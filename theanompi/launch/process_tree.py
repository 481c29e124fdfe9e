"""Every process mpiexec starts on this host, followed while the session runs and ended with it.

mpiexec runs in a session (and process group) of its own, so one ``killpg`` reaches it and its ranks; but not
everything it starts stays there: PRRTE puts the ``ssh`` that starts its daemon on another host in a process group
of its own, and a process whose parent died is handed to init. :class:`ProcessTree` therefore looks at ``/proc``
(every second, from the launcher's wait loop) and remembers every process that descends from mpiexec, belongs to its
session, or shares a process group with one it remembers -- with its start time, so that a pid the system hands out
again is never taken for it. :meth:`ProcessTree.end` ends them all: SIGTERM, then SIGKILL to what is left after a
grace period, and waits until they are gone.

Example
-------
>>> import subprocess, sys
>>> proc = subprocess.Popen([sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '30']); "
...                          "time.sleep(30)"], start_new_session=True)
>>> tree = ProcessTree(proc.pid)
>>> import time; time.sleep(0.5); tree.observe()
>>> sorted(p.name for p in tree.alive())
['python', 'sleep']
>>> [p.name for p in tree.end(grace=2.0)], tree.alive()
(['python', 'sleep'], [])
>>> proc.wait()
-15
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessInfo:
    """One process as ``/proc/PID/stat`` shows it; ``start`` (clock ticks after boot) tells a reused pid apart."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int
    name: str


def read_process(pid: int) -> ProcessInfo | None:
    """The process ``pid`` (None when it is gone or a zombie: nothing left to end)."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    name = stat[stat.find("(") + 1:stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2:].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return ProcessInfo(pid=pid, ppid=int(fields[1]), pgid=int(fields[2]), sid=int(fields[3]), start=int(fields[19]),
                       name=name)


def all_processes() -> dict[int, ProcessInfo]:
    """Every live process of this host (that this process may see)."""
    found = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            info = read_process(int(entry.name))
            if info is not None:
                found[info.pid] = info
    return found


def command_line(pid: int) -> list[str]:
    """The arguments of process ``pid`` ([] when it is gone)."""
    try:
        return [a.decode(errors="replace") for a in (PROC / str(pid) / "cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


class ProcessTree:
    """The processes started by the process ``root`` (mpiexec, a session leader): see the module's docstring."""

    def __init__(self, root: int):
        self.root = root
        #: pid -> the process as first seen (its start time identifies it)
        self.seen: dict[int, ProcessInfo] = {}

    def observe(self) -> None:
        """Remember every process that now descends from ``root`` or from one remembered, belongs to ``root``'s
        session, or shares a process group with one remembered."""
        live = all_processes()
        children: dict[int, list[int]] = {}
        for info in live.values():
            children.setdefault(info.ppid, []).append(info.pid)
        known = {pid for pid, info in self.seen.items() if self._same(live.get(pid), info)}
        pending = [self.root, *known]
        groups = {self.seen[pid].pgid for pid in known} | {self.root}
        found: set[int] = set()
        while pending:
            pid = pending.pop()
            if pid in found:
                continue
            found.add(pid)
            pending += children.get(pid, [])
        found |= {pid for pid, info in live.items() if info.sid == self.root or info.pgid in groups}
        for pid in found:
            if pid in live and pid != os.getpid() and pid not in known:
                self.seen[pid] = live[pid]

    @staticmethod
    def _same(now: ProcessInfo | None, then: ProcessInfo) -> bool:
        return now is not None and now.start == then.start

    def alive(self) -> list[ProcessInfo]:
        """The remembered processes that still run (the same processes: same start time), oldest first."""
        return sorted((info for pid, info in self.seen.items() if self._same(read_process(pid), info)),
                      key=lambda info: (info.start, info.pid))

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every remembered process that still runs."""
        for info in self.alive():
            try:
                os.kill(info.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def end(self, grace: float = 5.0) -> list[ProcessInfo]:
        """End every remembered process (looking once more first): SIGTERM, SIGKILL after ``grace`` seconds to what
        is left; wait (a few seconds at most) until they are gone. Returns the processes it found running."""
        self.observe()
        running = self.alive()
        if not running:
            return []
        self.signal(signal.SIGTERM)
        for sig, wait in ((signal.SIGKILL, grace), (None, 5.0)):
            deadline = time.monotonic() + wait
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if sig is None or not self.alive():
                break
            self.observe()  # what the dying ones started meanwhile
            self.signal(sig)
        return running
