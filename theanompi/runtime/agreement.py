"""Agreement checks: every rank of a communicator states facts it must share with the others (the parameter
layout, the number of batches) before the first exchange; a disagreement stops them all with every rank's value.

Example
-------
>>> check_agreement(comm, n_batch_train=56, n_params=1234)   # collective over comm   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from theanompi.core.errors import ContractError
from theanompi.session.watchdog import ACTIVITY


def check_agreement(comm: Any, **facts: Any) -> None:
    """Raise ContractError on every rank if ranks disagree on any fact (before exchanging)."""
    with ACTIVITY.waiting("an agreement check"):
        gathered = comm.allgather(facts)
    for key in facts:
        values = [g[key] for g in gathered]
        if any(v != values[0] for v in values):
            listing = ", ".join(f"rank {r} has {v!r}" for r, v in enumerate(values))
            raise ContractError(f"workers disagree on {key}: {listing}")
