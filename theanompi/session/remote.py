"""Ranks on other hosts: how they get the session spec and how the launcher learns how they ended.

A rank on another host may not see the launcher's file system (no shared run
directory). Two things then travel through mpiexec instead of files:

* the spec: ranks on other hosts get ``RUN_DIR/session.json`` in the environment
  variable ``THEANOMPI_REMOTE_SPEC`` (compressed, base64); :func:`load_rank_spec`
  prefers it to the file;
* the ends: such a rank still writes ``RUN_DIR/ranks/rank-N.*`` on its own host,
  and also prints one status line per event (started, done, failed) on stderr,
  which mpiexec forwards to the launcher; :class:`RemoteRanks` reads them out of
  mpiexec's stderr and says which rank on which host ended how, and where its
  records are;
* that it is still there: such a rank also prints an ``alive`` line every few seconds
  (:class:`Heartbeat`), so that a host whose link went down -- its ranks' messages stop,
  nothing fails -- is found silent (:meth:`RemoteRanks.silent`) and named within WATCHDOG.

Ranks on the launcher's host are untouched: no variable, no status lines.

Example
-------
>>> line = status_line(RankStatus(rank=3, state="failed", host="node2", run_dir="/tmp/run", message="boom"))
>>> remote = RemoteRanks(run_dir="/tmp/run")
>>> remote.feed(line)
True
>>> remote.feed("an ordinary log line")
False
>>> remote.failures(lambda r: f"rank {r}")
['boom (rank 3 ran on host node2; its records are there, in /tmp/run)']
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from theanompi.core.no_follow import read_bounded
from theanompi.session.rank_status import has_status
from theanompi.session.spec import SPEC_LIMIT, SessionSpec

#: environment variable carrying the session spec to ranks on other hosts
REMOTE_SPEC_ENV = "THEANOMPI_REMOTE_SPEC"
#: prefix of the status lines remote ranks print on stderr
STATUS_PREFIX = "theanompi-rank-status "
#: how Open MPI reports a rank that lost its TCP peer, the peer's host (not always printed), the aborting rank
_CONNECTION_LOST_RE = re.compile(r"Socket closed|peer process has unexpectedly disconnected")
_PEER_HOST_RE = re.compile(r"Peer host:\s*(\S+)")
_ABORTED_RANK_RE = re.compile(r"due to process rank (\d+) with PID \d+ on node \S+ calling\s+\"abort\"")


@dataclass(frozen=True)
class RankStatus:
    """One event of a rank on another host: ``state`` is 'started', 'alive' (a heartbeat), 'done' or 'failed'."""

    rank: int
    state: str
    host: str
    run_dir: str
    pid: int = 0
    message: str = ""


def encode_spec(text: str) -> str:
    """The spec's JSON text as one environment-safe word (zlib + urlsafe base64).

    >>> decode_spec(encode_spec('{"rule": "BSP"}'))
    '{"rule": "BSP"}'
    """
    return base64.urlsafe_b64encode(zlib.compress(text.encode())).decode()


def decode_spec(word: str) -> str:
    """The spec's JSON text :func:`encode_spec` made (at most :data:`~theanompi.session.spec.SPEC_LIMIT` bytes)."""
    text = zlib.decompressobj().decompress(base64.urlsafe_b64decode(word.encode()), SPEC_LIMIT + 1)
    if len(text) > SPEC_LIMIT:
        raise ValueError(f"{REMOTE_SPEC_ENV} holds more than {SPEC_LIMIT} bytes of spec")
    return text.decode()


def remote_spec_options(spec_path: str) -> list[str]:
    """mpiexec options giving a rank on another host the spec file's contents (none while there is no file yet:
    such a rank then reads ``spec_path`` itself, which needs a shared file system)."""
    path = Path(spec_path)
    if not path.is_file():
        return []
    text = read_bounded(path, SPEC_LIMIT, "session spec", root=path.parent).decode()
    return ["-x", f"{REMOTE_SPEC_ENV}={encode_spec(text)}"]


def is_remote_rank() -> bool:
    """Whether this process was started as a rank on another host than the launcher's."""
    return REMOTE_SPEC_ENV in os.environ


def load_rank_spec(spec_path: str) -> SessionSpec:
    """The session spec of this rank: from the environment on another host, else from ``spec_path``."""
    word = os.environ.get(REMOTE_SPEC_ENV)
    if word:
        return SessionSpec.from_json(decode_spec(word))
    return SessionSpec.load(Path(spec_path))


def status_line(status: RankStatus) -> str:
    """The stderr line that reports ``status`` to the launcher."""
    return STATUS_PREFIX + json.dumps(asdict(status), sort_keys=True)


def parse_status_line(line: str) -> RankStatus | None:
    """The status a line reports, or None for any other line (also for a garbled status line)."""
    text = line.strip()
    if not text.startswith(STATUS_PREFIX):
        return None
    try:
        return RankStatus(**json.loads(text[len(STATUS_PREFIX):]))
    except (ValueError, TypeError):
        return None


def report_to_launcher(spec: SessionSpec, rank: int, state: str, message: str = "") -> None:
    """On a rank on another host: print its status line on stderr (nothing elsewhere)."""
    if not is_remote_rank():
        return
    status = RankStatus(rank=rank, state=state, host=socket.gethostname(), run_dir=str(spec.run_dir),
                        pid=os.getpid(), message=message)
    sys.stderr.write(status_line(status) + "\n")
    sys.stderr.flush()


class Heartbeat(threading.Thread):
    """On a rank on another host: an ``alive`` status line every ``every`` seconds, for as long as the process
    lives (nothing on the launcher's host)."""

    def __init__(self, spec: SessionSpec, rank: int, every: float):
        super().__init__(name="theanompi-heartbeat", daemon=True)
        self.spec, self.rank, self.every = spec, rank, every

    def run(self) -> None:
        while True:
            time.sleep(self.every)
            try:
                report_to_launcher(self.spec, self.rank, "alive")
            except (OSError, ValueError):  # stderr closed: the session is ending
                return


class RemoteRanks:
    """The launcher's view of the ranks on other hosts, built from their status lines."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.latest: dict[int, RankStatus] = {}
        self.heard: dict[int, float] = {}  # rank -> when its last status line came (time.monotonic)

    def feed(self, line: str) -> bool:
        """Take ``line`` if it is a status line (True); other lines are left to the caller (False)."""
        status = parse_status_line(line)
        if status is None:
            return False
        self.heard[status.rank] = time.monotonic()
        if status.state != "alive" or status.rank not in self.latest:
            self.latest[status.rank] = status if status.state != "alive" else replace(status, state="started")
        return True

    def silent(self, limit: float, now: float | None = None) -> dict[int, str]:
        """Remote ranks that started, have not ended, and were not heard for ``limit`` seconds: rank -> host.

        >>> remote = RemoteRanks("/tmp/run")
        >>> _ = remote.feed(status_line(RankStatus(rank=2, state="alive", host="node2", run_dir="/tmp/run")))
        >>> remote.silent(10.0), remote.silent(10.0, now=time.monotonic() + 11)
        ({}, {2: 'node2'})
        """
        now = time.monotonic() if now is None else now
        return {r: s.host for r, s in sorted(self.latest.items())
                if s.state == "started" and now - self.heard.get(r, now) > limit}

    def where(self, status: RankStatus) -> str:
        """Where the records of ``status``'s rank are, as a clause for a message."""
        if has_status(self.run_dir, status.rank, "pid"):
            return f"rank {status.rank} ran on host {status.host}; its records are in the shared {status.run_dir}"
        return f"rank {status.rank} ran on host {status.host}; its records are there, in {status.run_dir}"

    def failures(self, describe: Callable[[int], str]) -> list[str]:
        """Messages of the remote ranks that failed, in rank order, each saying where its records are."""
        return [f"{s.message or describe(r) + ' failed'} ({self.where(s)})"
                for r, s in sorted(self.latest.items()) if s.state == "failed"]

    def lost(self) -> list[int]:
        """Remote ranks that started but reported neither an end nor an error."""
        return [r for r, s in sorted(self.latest.items()) if s.state == "started"]

    def lost_host(self, mpiexec_output: str, rank_hosts: list[str], describe: Callable[[int], str]) -> str | None:
        """One line naming the host whose ranks vanished, when a rank aborted on a closed connection.

        A rank whose TCP peer on another host disappears aborts ("Socket closed"), often
        before mpiexec hears that the peer's processes died, so mpiexec names the survivor.
        This names the other host(s) instead, and their ranks that reported no end.
        ``rank_hosts``: each session rank's host, '' for this host. None on one host or
        for any other failure.
        """
        lost = self.lost_hosts(mpiexec_output, rank_hosts)
        if not lost:
            return None
        reporter = _ABORTED_RANK_RE.search(mpiexec_output)
        silent = [r for r, host in enumerate(rank_hosts) if host in lost and not self._ended(r)]
        names = ", ".join(sorted(h or socket.gethostname() for h in lost))
        who = ", ".join(describe(r) for r in silent) or "its ranks"
        seen_by = f"; {describe(int(reporter.group(1)))} lost its connection to them" if reporter else ""
        return f"lost host {names}: {who} stopped without reporting an error (killed, or the host went down){seen_by}"

    @staticmethod
    def lost_hosts(mpiexec_output: str, rank_hosts: list[str]) -> set[str]:
        """The hosts (as ``rank_hosts`` names them, '' for this one) whose ranks vanished when a rank aborted on a
        closed connection (see :meth:`lost_host`); empty for any other failure."""
        if not any(rank_hosts) or not _CONNECTION_LOST_RE.search(mpiexec_output):
            return set()
        peer = _PEER_HOST_RE.search(mpiexec_output)
        reporter = _ABORTED_RANK_RE.search(mpiexec_output)
        if peer and peer.group(1) in rank_hosts:
            return {peer.group(1)}
        if reporter and int(reporter.group(1)) < len(rank_hosts):
            return set(rank_hosts) - {rank_hosts[int(reporter.group(1))]}
        return set()

    def _ended(self, rank: int) -> bool:
        """Whether ``rank`` reported an end: a status line, or a status file in this host's RUN_DIR."""
        status = self.latest.get(rank)
        if status is not None and status.state != "started":
            return True
        return any(has_status(self.run_dir, rank, end) for end in ("done", "failed"))

    def ends(self, describe: Callable[[int], str], remote: list[int]) -> list[str]:
        """One line per rank of ``remote`` (the ranks on other hosts): how it ended, where its records are."""
        words = {"done": "finished", "failed": "failed", "started": "stopped without reporting an end (killed?)"}
        lines = []
        for rank in remote:
            status = self.latest.get(rank)
            if status is None:
                lines.append(f"{describe(rank)} never reported (it may not have started)")
            else:
                lines.append(f"{describe(rank)} {words.get(status.state, status.state)} ({self.where(status)})")
        return lines
