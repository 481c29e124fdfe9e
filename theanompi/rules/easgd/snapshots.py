"""EASGD's checkpoints on the server: each worker's last snapshot and the checkpoint still waiting for some of them
(pure Python; the protocol is described in :mod:`theanompi.rules.easgd`).

After every ``CHECKPOINT_EVERY``-th global epoch the server asks every working worker for a snapshot at its next
exchange; the checkpoint is written once none is awaited any more (answered, stopped or lost). A worker that has
stopped left its final snapshot already; a lost one's, or one that never sent any, is the centre.

Example
-------
>>> book = SnapshotBook(n_workers=2)
>>> book.request(epoch=3, working={0, 1}); book.wants(1), book.is_due()
(True, False)
>>> book.keep(0, Snapshot(params=[1.0], state=[], steps=8)); book.keep(1, Snapshot([2.0], [], 9)); book.is_due()
True
>>> [s.steps for s in book.rows(lost=[1], centre=[0.5])], book.epoch
([8, 0], 3)
>>> book.written(); book.is_due()
False
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Snapshot:
    """One worker's state at one of its exchanges: its parameters (flat), optimizer state and steps done."""

    params: Any
    state: list[Any]
    steps: int


class SnapshotBook:
    """Every worker's last :class:`Snapshot`, and which of them the pending checkpoint (of global ``epoch``) awaits.

    ``epoch`` is None while no checkpoint is pending.
    """

    def __init__(self, n_workers: int):
        self.last: list[Snapshot | None] = [None] * n_workers
        self.awaited: set[int] = set()
        self.epoch: int | None = None
        self.units = 0  # steps into the next global epoch (a checkpoint inside an epoch)

    def request(self, epoch: int, working: Iterable[int], units: int = 0) -> None:
        """A checkpoint after global ``epoch`` (and ``units`` steps of the next): it awaits a snapshot of every
        worker in ``working``."""
        self.epoch = epoch
        self.units = units
        self.awaited = set(working)

    def wants(self, k: int) -> bool:
        """Whether the pending checkpoint still awaits worker ``k``'s snapshot."""
        return k in self.awaited

    def keep(self, k: int, snapshot: Snapshot) -> None:
        """Worker ``k``'s newest snapshot."""
        self.last[k] = snapshot
        self.awaited.discard(k)

    def forget(self, lost: Iterable[int]) -> None:
        """Lost workers are awaited no more."""
        self.awaited.difference_update(lost)

    def is_due(self) -> bool:
        """A checkpoint is pending and awaits nobody: write it now."""
        return self.epoch is not None and not self.awaited

    def rows(self, lost: Iterable[int], centre: Any) -> list[Snapshot]:
        """Per worker, the snapshot the checkpoint holds: its last, or the centre's (lost, or none sent)."""
        gone = set(lost)
        empty = Snapshot(params=centre, state=[], steps=0)
        return [s if s is not None and k not in gone else empty for k, s in enumerate(self.last)]

    def written(self) -> None:
        """The pending checkpoint was written."""
        self.epoch = None
