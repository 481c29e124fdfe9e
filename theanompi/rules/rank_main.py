"""Every rank's entry point: ``python -m theanompi.rules.rank_main RUN_DIR/session.json`` (started by mpiexec).

Workers and servers alike: pin device -> configure pytensor -> MPI -> logging -> the rule's rank loop.
Any exception ends the whole session (MPI Abort) after leaving
a ``failed`` status file (:mod:`theanompi.session.rank_status`) with one line naming the
rank, so the launcher can say which rank failed and nothing hangs.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import traceback

from theanompi.backend.pytensor_config import configure_pytensor
from theanompi.comm.mpi_settings import apply_mca_defaults
from theanompi.core.errors import ConfigError
from theanompi.core.log import setup_logging
from theanompi.models.loader import theano_era_hint
from theanompi.rules import get_rule
from theanompi.runtime.rank_context import RankContext
from theanompi.session.rank_status import status_path, write_status
from theanompi.session.remote import Heartbeat, is_remote_rank, load_rank_spec, report_to_launcher
from theanompi.session.spec import SessionSpec
from theanompi.session.watchdog import Watchdog

log = logging.getLogger("theanompi")


def _disk_full_hint(err: BaseException) -> str | None:
    """What a full disk cost, for an OSError saying ENOSPC (else None)."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return ("the disk is full: this rank stopped, and records or the final model it was writing were not "
                "saved; free space and RESUME from the last checkpoint")
    return None


def _fail(spec: SessionSpec, rank: int, who: str, err: BaseException) -> None:
    hint = theano_era_hint(err) or _disk_full_hint(err)
    line = f"{who}: {type(err).__name__}: {err}" + (f" ({hint})" if hint else "")
    line = line.replace("\n", " ")
    try:
        write_status(spec.run_dir, rank, "failed", line)
    except OSError:  # e.g. the disk is full: the launcher reads the line from stderr instead
        pass
    report_to_launcher(spec, rank, "failed", line)
    if isinstance(err, ConfigError):
        sys.stderr.write(f"[rank {rank}] error: {line}\n")
    else:
        sys.stderr.write(f"[rank {rank}] error: {line}\n{traceback.format_exc()}")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m theanompi.rules.rank_main RUN_DIR/session.json\n")
        return 2
    spec = load_rank_spec(argv[0])  # on another host, from the environment (theanompi.session.remote)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))
    role, device = spec.ranks[rank]["role"], spec.ranks[rank]["device"]
    who = f"rank {rank} ({role} on {device})"
    # the start, reported at once: lets tools (and tests) find each rank, and the launcher's STARTUP_TIMEOUT end
    write_status(spec.run_dir, rank, "pid", str(os.getpid()))
    report_to_launcher(spec, rank, "started")

    configure_pytensor()
    apply_mca_defaults()  # Open MPI's settings, before MPI starts
    os.chdir(spec.cwd)
    from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py starts MPI: once pytensor is configured

    comm = MPI.COMM_WORLD

    options = spec.options
    setup_logging(comm.rank, options.log_level)
    if options.watchdog:  # every phase of every rank, from here on
        Watchdog(options.watchdog, status_path(spec.run_dir, rank, "stall"), who,
                 build_timeout=options.watchdog_build, root=spec.run_dir).start()
        if is_remote_rank():  # the launcher hears it is alive: a host gone silent is found within WATCHDOG
            Heartbeat(spec, rank, every=min(5.0, max(0.5, options.watchdog / 4))).start()
    try:
        ctx = RankContext(spec=spec, rank=comm.rank, role=role, device=device, comm=comm)
        get_rule(spec.rule).run_rank(ctx)
        write_status(spec.run_dir, rank, "done", "ok")  # the watchdog's reports no longer count
        report_to_launcher(spec, rank, "done")
    except BaseException as err:  # any failure must end every rank
        _fail(spec, rank, who, err)
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
