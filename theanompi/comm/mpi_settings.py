"""Open MPI settings a rank makes before MPI starts (importing mpi4py starts it).

``OMPI_MCA_coll_libnbc_iallreduce_algorithm=3``: Open MPI's nonblocking allreduce (the ``libnbc`` component,
which runs ``MPI_Iallreduce``) picks a binomial tree whenever the buffer is reduced in place or fewer than 4 ranks
take part. On 2 ranks of the 2-vCPU AMD EPYC VM that took 2x (1 MB) to 4x (4 MB) the time of the blocking
``MPI_Allreduce`` of the same buffer; algorithm 3 (reduce-scatter then allgather; libnbc itself falls back to a
ring for non-commutative ops or fewer elements than ranks) took the same time as the blocking one. BSP's exchange
overlapped with backward sums every gradient bucket in place with ``Iallreduce``
(:mod:`theanompi.comm.exchange.overlap`).

``OMPI_MCA_btl_tcp_links=2``: between hosts Open MPI's TCP transport opens one connection per pair of ranks by
default, and over it a rank's sending and receiving at once (every allreduce, a ``Sendrecv``) moved only half of the
link's rate each way: measured between two tools/netsim hosts whose links run at 100 Mbit/s, a 16 MB ``Sendrecv``
ran at 47 Mbit/s each way with one connection and 91 with two, the allreduce of a 16 MB vector at 48 and 89
(``Allreduce`` sends and receives the whole vector once on 2 ranks); one direction alone ran at 95 either way.
Ranks on one host talk through shared memory and open no connection.

A value set in the environment wins; MPI libraries other than Open MPI ignore ``OMPI_MCA_*`` variables.

Example
-------
>>> env = {}
>>> apply_mca_defaults(env)
>>> env
{'OMPI_MCA_coll_libnbc_iallreduce_algorithm': '3', 'OMPI_MCA_btl_tcp_links': '2'}
>>> env = {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "1"}    # the user's choice stays
>>> apply_mca_defaults(env); env["OMPI_MCA_coll_libnbc_iallreduce_algorithm"]
'1'
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: Open MPI parameters (as environment variables) every rank sets unless they are set already
MCA_DEFAULTS = {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "3", "OMPI_MCA_btl_tcp_links": "2"}


def apply_mca_defaults(environ: MutableMapping[str, str] | None = None) -> None:
    """Set :data:`MCA_DEFAULTS` in ``environ`` (this process's environment by default) where not set; call it before
    MPI starts."""
    environ = os.environ if environ is None else environ
    for key, value in MCA_DEFAULTS.items():
        environ.setdefault(key, value)
