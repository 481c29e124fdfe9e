"""Two "hosts" on one machine for tests/sessions/test_two_hosts.py: a cluster of tools/netsim_cluster.py with two
hosts whose links are not limited.

``host1`` (10.213.17.1) runs the launcher and shares this machine's /tmp (the tests read its run directories);
``host2`` (10.213.17.2) has its own /tmp, so a run directory under /tmp is not shared between the two. mpiexec
reaches ``host2`` through tools/netsim_agent.sh, which stands in for ssh (``PRTE_MCA_plm_ssh_agent``). Needs root.

Example
-------
>>> hosts = TwoHosts.create()          # doctest: +SKIP
>>> hosts.run_in("host2", ["hostname"], capture_output=True, text=True).stdout   # doctest: +SKIP
'host2\\n'
>>> hosts.destroy()                    # doctest: +SKIP
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from netsim_cluster import AGENT, Cluster

SUBNET = "10.213.17.0/24"
__all__ = ["AGENT", "SUBNET", "TwoHosts"]


class TwoHosts(Cluster):
    """host1 and host2 (see the module docstring); :meth:`destroy` removes everything."""

    @classmethod
    def create(cls, n_hosts: int = 2, **options: Any) -> TwoHosts:
        """Make both hosts; raises OSError (after cleaning up) when they cannot be made here."""
        options.setdefault("private_tmp", ("host2",))
        options.setdefault("subnet", SUBNET)
        made = super().create(n_hosts, **options)
        assert isinstance(made, TwoHosts)
        return made
