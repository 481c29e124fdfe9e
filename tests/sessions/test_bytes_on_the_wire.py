"""``bytes_sent`` against the bytes on the wire: sessions across tools/netsim hosts (one rank per host, so all that a
rank sends crosses its host's link), each host's link counter (tx_bytes) against what the records say its rank sent.

What the link carries beyond the payload: Ethernet, IP and TCP headers (66 bytes per segment of up to 1448 payload
bytes, ~4.6 %), the TCP acknowledgements of what the host received, MPI's own headers and handshakes, the
bookkeeping collectives (agreement checks, the epochs' metric sums, the summaries) and the launcher's traffic
(mpiexec's daemons, the ranks' output forwarded to host1). Needs root (skips otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, write_cfg

sys.path.insert(0, str(ROOT / "tools"))
from netsim_cluster import Cluster, parse_rate

TMLAUNCHER = str(Path(sys.executable).parent / "tmlauncher")
TRAINING = dict(N_EPOCHS=2, MODEL_HIDDEN=512, MODEL_BATCH_SIZE=32)
#: the wire may carry this much more than the payload (headers, acknowledgements) ...
OVERHEAD = 0.12
#: ... plus this much (MPI's start, the bookkeeping collectives, the launcher's traffic)
FIXED_BYTES = 400_000


@pytest.fixture
def workdir():
    """Outside /tmp, so every host sees it (as a shared file system would); the records are read there."""
    path = Path(tempfile.mkdtemp(prefix="theanompi-wire-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def session_on_hosts(workdir: Path, n_hosts: int, rate: str, **keys) -> tuple[dict, dict[str, int]]:
    """Run a session on ``n_hosts`` netsim hosts from host1; returns its summary and each host's tx_bytes."""
    try:
        cluster = Cluster.create(n_hosts, rate=parse_rate(rate))
    except OSError as err:
        pytest.skip(f"netsim hosts cannot be made here: {err}")
    try:
        cfg = write_cfg(workdir / "s.cfg", RUN_DIR=workdir / "run", **TRAINING, **keys)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        env.setdefault("THEANOMPI_CACHE_DIR", str(Path.home() / ".cache" / "theanompi"))
        proc = subprocess.run(cluster.enter("host1", cwd=workdir) + [TMLAUNCHER, f"-cfg={cfg}"],
                              env=cluster.mpi_env(env), capture_output=True, text=True, timeout=400,
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        sent = {host: cluster.tx_bytes(host) for host in cluster.hosts}
    finally:
        cluster.destroy()
    return json.loads((workdir / "run" / "summary.json").read_text()), sent


def assert_wire_agrees(counted: int, wire: int, host: str) -> None:
    assert counted <= wire <= counted * (1 + OVERHEAD) + FIXED_BYTES, \
        f"{host}: the records say {counted} bytes, its link sent {wire} ({wire / counted:.3f}x)"


@pytest.mark.timeout(420)
def test_bsp_across_two_hosts_sends_what_its_records_say(workdir):
    summary, wire = session_on_hosts(workdir, 2, "200mbit", RULE="BSP", BSP_SYNC_TYPE="cdd",
                                     DEVICES="host1:cpu0;host2:cpu0")
    print("BSP", summary["bytes_sent"], wire)
    for rank, host in enumerate(("host1", "host2")):
        assert_wire_agrees(summary["bytes_sent"][rank], wire[host], host)


@pytest.mark.timeout(420)
def test_easgd_across_three_hosts_sends_what_its_records_say(workdir):
    # the server on host1, a worker on each other host
    summary, wire = session_on_hosts(workdir, 3, "200mbit", RULE="EASGD", EASGD_TAU=1,
                                     DEVICES="host1:cpu0;host2:cpu0;host3:cpu0")
    print("EASGD", summary["bytes_sent"], wire)
    assert min(summary["exchanges"]) > 1
    for rank, host in enumerate(("host1", "host2", "host3")):
        assert_wire_agrees(summary["bytes_sent"][rank], wire[host], host)
