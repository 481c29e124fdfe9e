"""Carrying on without a lost worker (``ON_WORKER_LOSS=continue``), on Open MPI's ULFM.

With ``ON_WORKER_LOSS=continue`` the launcher starts mpiexec with ``--with-ft ulfm``:
a rank that dies no longer ends the job; operations that involve it fail on the
survivors with ``MPI_ERR_PROC_FAILED`` (or ``..._PENDING`` for a wildcard receive,
``MPI_ERR_REVOKED`` on a revoked communicator). The rules that can carry on
(EASGD's server, ASGD's workers and servers) catch those errors with
:func:`is_process_failure`, learn who died with :func:`acknowledge_failures`,
drop the lost ranks and go on; collectives among survivors go through
:func:`resilient` (agree, shrink, retry), or :class:`SurvivorsComm`, a communicator
whose collectives all do. Rank 0 of such a communicator (the rank that writes the
records) cannot be lost: survivors then stop with :class:`~theanompi.core.errors.SessionError`.

The launcher side: :func:`theanompi.session.rank_status.lost_ranks` lists the ranks that
started but neither finished nor reported an error (killed).

Example
-------
>>> try:                                                     # doctest: +SKIP
...     comm.Recv(buf, source=peer)
... except MPI.Exception as err:
...     if not is_process_failure(err):
...         raise
...     lost = acknowledge_failures(comm)      # e.g. [2]: ranks of ``comm``
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar, cast

from theanompi.core.errors import SessionError

log = logging.getLogger("theanompi")
T = TypeVar("T")


def is_process_failure(err: BaseException) -> bool:
    """True for the MPI errors that mean "a peer process has died"."""
    from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

    if not isinstance(err, MPI.Exception):
        return False
    return err.Get_error_class() in (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED)


def acknowledge_failures(comm) -> list[int]:
    """Acknowledge every failure ``comm`` knows of; return the failed ranks of ``comm`` (ascending).

    After this, wildcard receives (``ANY_SOURCE``) on ``comm`` work again.
    """
    from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

    comm.Ack_failed()
    failed = comm.Get_failed()
    try:
        ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), comm.Get_group())
    finally:
        failed.Free()
    return sorted(int(r) for r in ranks)


def resilient(comm, operation: Callable[[object], T], what: str) -> tuple[T, object]:
    """Run the collective ``operation(comm)`` among the survivors; returns (result, communicator).

    Every rank runs ``operation``; all then agree (``MPI_Comm_agree``, which works
    whatever has failed) whether it succeeded everywhere. If not, the communicator is
    revoked and shrunk to the survivors and the operation is run again on the new one,
    which the caller must use from then on. ``operation`` must be safe to repeat.
    """
    while True:
        ok = 1
        try:
            result = operation(comm)
        except Exception as err:  # only process failures are recovered
            if not is_process_failure(err):
                raise
            ok, result = 0, None
        try:
            ok = comm.Agree(ok)
        except Exception as err:
            if not is_process_failure(err):
                raise
            comm.Ack_failed()
            ok = comm.Agree(ok)  # the agreed value is uniform even when a failure is reported
        if ok:
            return cast(T, result), comm  # every rank's operation returned (T may include None)
        before = comm.size
        failed = acknowledge_failures(comm)
        if 0 in failed:
            raise SessionError(f"{what}: rank 0 of the workers (the one that writes the records) was lost; "
                               "the session cannot carry on without it")
        comm.Revoke()
        comm = comm.Shrink()
        log.warning("%s: %d of %d ranks left after a lost worker; carrying on", what, comm.size, before)


class SurvivorsComm:
    """A communicator whose collectives carry on among the survivors (see :func:`resilient`).

    Point-to-point calls and attributes (``rank``, ``size``) go to the current
    communicator, which is replaced by a shrunk one after a loss. Collectives must be
    safe to repeat (out-of-place buffers).

    Example
    -------
    >>> comm = SurvivorsComm(role_comm, "ASGD workers")       # doctest: +SKIP
    >>> comm.allreduce(1)                                     # doctest: +SKIP
    2
    """

    COLLECTIVES = frozenset({"Barrier", "barrier", "allreduce", "Allreduce", "allgather", "Allgather",
                             "gather", "Gather", "bcast", "Bcast", "reduce", "Reduce", "Alltoall", "alltoall"})

    def __init__(self, comm, what: str):
        self._comm = comm
        self._original = comm
        self._what = what

    def lost(self) -> list[int]:
        """Ranks of the original communicator that are no longer in the current one."""
        from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI

        kept = MPI.Group.Translate_ranks(self._comm.Get_group(), list(range(self._comm.size)),
                                         self._original.Get_group())
        return sorted(set(range(self._original.size)) - set(kept))

    def __getattr__(self, name: str):
        attr = getattr(self._comm, name)
        if name not in self.COLLECTIVES:
            return attr

        def collective(*args, **kwargs):
            result, self._comm = resilient(self._comm, lambda c: getattr(c, name)(*args, **kwargs), self._what)
            return result

        return collective
