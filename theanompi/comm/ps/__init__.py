"""Parameter server: tables sharded over server ranks, updaters, sync and async modes.

Used by the ASGD rule (dedicated server ranks) and the Multiverso-style API.
"""

from theanompi.comm.ps.updaters import UPDATERS, make_updater

__all__ = ["UPDATERS", "make_updater"]
