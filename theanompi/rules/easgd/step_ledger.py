"""EASGD's bookkeeping of local steps: who was granted how many, who reported what (pure Python).

The server hands out exactly ``target`` local steps (``N_EPOCHS`` global epochs) in
blocks of at most ``tau``; a grant of 0 tells a worker to stop. A worker's report
must equal its outstanding grant. A lost worker's outstanding grant returns to the
pool, so the others train it. At every moment
``reported + sum(outstanding grants) == assigned <= target``.

Example
-------
>>> ledger = StepLedger(n_workers=2, tau=4, target=10)
>>> ledger.first_grants()
[4, 4]
>>> ledger.report(0, 4), ledger.report(1, 4), ledger.report(0, 2), ledger.active
(2, 0, 0, 0)
>>> ledger.reported, ledger.assigned, ledger.is_complete()
(10, 10, True)
"""

from __future__ import annotations


class StepLedgerError(RuntimeError):
    """A worker reported a step count that differs from its grant (a protocol bug)."""


def grant_steps(tau: int, target: int, assigned: int) -> int:
    """The next block of local steps a worker may do: ``min(tau, target - assigned)`` (0 = stop).

    Example
    -------
    >>> [grant_steps(4, 10, a) for a in (0, 4, 8, 10)]
    [4, 4, 2, 0]
    """
    return max(0, min(tau, target - assigned))


class StepLedger:
    """Grants and reports of local steps for ``n_workers`` workers; ``done``: steps trained before a resume.

    Example
    -------
    >>> ledger = StepLedger(n_workers=3, tau=5, target=12)
    >>> ledger.first_grants(), ledger.active
    ([5, 5, 2], 3)
    >>> ledger.lose(1), ledger.assigned        # its 5 granted steps go back to the pool
    (5, 7)
    >>> ledger.report(0, 5)
    5
    """

    def __init__(self, n_workers: int, tau: int, target: int, done: int = 0):
        self.tau = tau
        self.target = target
        self.reported = done  # steps trained (reported) over the session, resumed ones included
        self.assigned = done  # reported + every outstanding grant
        self.granted = [0] * n_workers  # each worker's outstanding grant (0: stopped or lost)
        self.steps = [0] * n_workers  # steps each worker reported in this run
        self.lost: list[int] = []

    @property
    def active(self) -> int:
        """Workers holding a non-zero grant (they will report again)."""
        return sum(1 for g in self.granted if g > 0)

    def _grant(self, k: int) -> int:
        grant = grant_steps(self.tau, self.target, self.assigned)
        self.assigned += grant
        self.granted[k] = grant
        return grant

    def first_grants(self) -> list[int]:
        """Every worker's first grant, in worker order."""
        return [self._grant(k) for k in range(len(self.granted))]

    def report(self, k: int, steps: int) -> int:
        """Book worker ``k``'s report of ``steps`` (must equal its grant); return its next grant."""
        if k in self.lost:
            raise StepLedgerError(f"EASGD protocol error: worker {k} reported after it was lost")
        if steps != self.granted[k]:
            raise StepLedgerError(f"EASGD protocol error: worker {k} reported {steps} steps, "
                                  f"granted {self.granted[k]}")
        self.reported += steps
        self.steps[k] += steps
        self.granted[k] = 0
        return self._grant(k)

    def lose(self, k: int) -> int:
        """Forget worker ``k``; its granted-but-unreported steps return to the pool. Returns how many."""
        if k in self.lost:
            return 0
        self.lost.append(k)
        returned, self.granted[k] = self.granted[k], 0
        self.assigned -= returned
        return returned

    def stop_granting(self) -> None:
        """Grant no more steps (every worker stops at its next report): the session ends at what was assigned.

        >>> ledger = StepLedger(n_workers=2, tau=4, target=100); _ = ledger.first_grants()
        >>> ledger.stop_granting(); ledger.report(0, 4), ledger.report(1, 4), ledger.is_complete()
        (0, 0, True)
        """
        self.target = self.assigned

    def is_complete(self) -> bool:
        """Every step of the target was granted and reported."""
        return self.reported == self.assigned == self.target

    def check_final(self) -> int:
        """At the end: reports must match grants; returns the untrained steps (non-zero only after a loss)."""
        if self.reported != self.assigned:
            raise StepLedgerError(f"EASGD: {self.reported} steps reported, {self.assigned} granted")
        missing = self.target - self.reported
        if missing > 0 and not self.lost:
            raise StepLedgerError(f"EASGD: {self.reported} steps reported, {self.target} expected")
        return missing
