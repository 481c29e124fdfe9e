"""RankContext: what a rule's rank loop receives -- the session's spec and options, this rank's place in it, and the
session's communicator.

Example
-------
>>> from theanompi.core.session_options import EASGDOptions
>>> from theanompi.session.spec import SessionSpec
>>> spec = SessionSpec(rule="EASGD", devices=["cpu0"], modelfile="m", modelclass="C", options=EASGDOptions(),
...                    ranks=[{"role": "server", "device": "cpu0"}, {"role": "worker", "device": "cpu0"}])
>>> ctx = RankContext(spec=spec, rank=1, role="worker", device="cpu0", comm=None)
>>> ctx.ranks_with_role("server"), ctx.options.tau
([0], 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from theanompi.core.session_options import SessionOptions
from theanompi.session.spec import SessionSpec

if TYPE_CHECKING:  # the launcher imports no mpi4py (tests/test_light_imports.py)
    from mpi4py import MPI

OptionsT = TypeVar("OptionsT", bound=SessionOptions)


@dataclass
class RankContext:
    """What a rule's ``run_rank`` receives."""

    spec: SessionSpec
    rank: int
    role: str
    device: str
    comm: MPI.Intracomm  # mpi4py communicator of the whole session (COMM_WORLD)

    @property
    def options(self) -> SessionOptions:
        """The session's options, typed and frozen: ``ctx.options.checkpoint_every``."""
        return self.spec.options

    def options_as(self, options_class: type[OptionsT]) -> OptionsT:
        """The session's options as the rule's options class (TypeError if the spec holds another rule's)."""
        options = self.spec.options
        if not isinstance(options, options_class):
            raise TypeError(f"the session's options are {type(options).__name__}, not {options_class.__name__}")
        return options

    def ranks_with_role(self, role: str) -> list[int]:
        """Session ranks playing ``role`` ('worker', 'server', ...), ascending."""
        return [i for i, r in enumerate(self.spec.ranks) if r["role"] == role]

    def role_comm(self) -> MPI.Comm:
        """A communicator of the ranks sharing this rank's role (collective over the session)."""
        roles = sorted({r["role"] for r in self.spec.ranks})
        return self.comm.Split(roles.index(self.role), self.rank)
