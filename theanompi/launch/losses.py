"""Whether a failed session lost members -- a worker killed, a host gone -- or failed of itself, and which.

An elastic session (:mod:`theanompi.launch.elastic`) restarts after a lost worker or host only: a rank that raised
an error of its own (a bug, NaN, a bad file) would raise it again, and a stuck rank or Ctrl-C are not membership
changes. The evidence is what the launcher already sees: mpiexec's report of a rank that *exited on a signal*, the
ranks of another host that closed their connections or went silent (:class:`theanompi.session.remote.RemoteRanks`),
and the ranks' own failure lines, which only count as the loss's consequence when they are MPI errors.

Example
-------
>>> killed_ranks("prterun noticed that process rank 1 with PID 6659 on node vm exited on\\nsignal 9 (Killed).")
[1]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from theanompi.core.devices import Device
from theanompi.session.rank_status import read_failures

if TYPE_CHECKING:
    from theanompi.launch.mpiexec import MpiexecRun

#: mpiexec's report of a rank that ended on a signal (SIGKILL: killed, or the OOM killer)
_KILLED_RE = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+signal (\d+)")
#: what a rank's own error line says when it only saw a peer vanish
_PEER_GONE_RE = re.compile(r"MPI_ERR_|Socket closed|unexpectedly disconnected|connection (?:reset|refused)", re.I)


def killed_ranks(mpiexec_output: str) -> list[int]:
    """The ranks mpiexec says exited on a signal, in the order reported."""
    return list(dict.fromkeys(int(rank) for rank, _ in _KILLED_RE.findall(mpiexec_output)))


@dataclass(frozen=True)
class Loss:
    """What a session lost: session ranks, hosts (every device there), the devices of its lost workers, and the
    session's failure line."""

    ranks: list[int]
    hosts: list[str]
    devices: list[Device]
    reason: str


def membership_loss(run: MpiexecRun) -> Loss | None:
    """The workers and hosts a failed session lost, or None when it failed otherwise (or did not fail)."""
    if not run.code or (run.failure or "").startswith("interrupted"):
        return None
    output = run.stderr_tail()
    rank_hosts = ["" if r.device.is_local else r.device.host for r in run.ranks]
    hosts = set(run.silent_hosts) | run.remote.lost_hosts(output, rank_hosts)
    ranks = [r for r in killed_ranks(output) if r < len(run.ranks)]
    ranks += [r for r, host in enumerate(rank_hosts) if host and host in hosts and r not in ranks]
    if not ranks:
        return None
    own = [line for line in read_failures(run.run_dir) + run.remote.failures(lambda r: f"rank {r}")
           if not _PEER_GONE_RE.search(line)]
    if own:
        return None  # a rank failed of itself: restarting would fail again
    devices = [run.ranks[r].device for r in ranks if run.ranks[r].role == "worker"]
    return Loss(ranks=sorted(ranks), hosts=sorted(h for h in hosts if h), devices=devices,
                reason=run.failure or f"mpiexec exited with code {run.code}")
