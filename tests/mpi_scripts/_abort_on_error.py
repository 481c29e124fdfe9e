"""Import first in an MPI test script: an uncaught exception on any rank aborts every rank (no hang)."""

import sys
import traceback

from mpi4py import MPI


def _abort(exc_type, exc, tb):
    traceback.print_exception(exc_type, exc, tb)
    sys.stderr.flush()
    MPI.COMM_WORLD.Abort(1)


sys.excepthook = _abort
