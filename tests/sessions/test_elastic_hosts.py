"""An elastic session that loses a host: two network namespaces play host1 and host2 (tests/assets/netns_hosts.py,
as in tests/sessions/test_two_hosts.py); host2's link is taken down mid-run. Nothing fails then -- its ranks' messages
just stop -- so the launcher finds host2 silent (no heartbeat for WATCHDOG seconds), ends what is left of the
session, leaves host2 out and restarts on host1 from the newest checkpoint. Only addresses inside the namespaces
are used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ASSETS, ROOT, write_cfg

sys.path.insert(0, str(ASSETS))
from netns_hosts import TwoHosts

TMLAUNCHER = str(Path(sys.executable).parent / "tmlauncher")


@pytest.fixture
def workdir():
    """Outside /tmp, so that it exists on both hosts (host2 has a /tmp of its own)."""
    path = Path(tempfile.mkdtemp(prefix="theanompi-elastic-hosts-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def set_links(hosts: TwoHosts, host: str, state: str) -> None:
    """Every link of ``host`` but its loopback ``up`` or ``down``, from inside the host."""
    shown = hosts.run_in(host, ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True, timeout=30)
    for name in {line.split(": ")[1].split("@")[0] for line in shown.stdout.splitlines()} - {"lo"}:
        hosts.run_in(host, ["ip", "link", "set", name, state], check=True, timeout=30)


def test_a_host_whose_link_goes_down_is_left_out_and_the_session_restarts_on_the_others(hosts, workdir):
    run = workdir / "run"
    cfg = write_cfg(workdir / "s.cfg", DEVICES="host1:cpu0,cpu1;host2:cpu0", RUN_DIR=run, N_EPOCHS=3,
                    MODELFILE=ASSETS / "elastic_models.py", MODELCLASS="StepLog", MODEL_BATCH_SIZE=20,
                    MODEL_NAP=0.05, CHECKPOINT_EVERY_ITERS=4, MAX_RESTARTS=1, MIN_WORKERS=2, WATCHDOG=6)
    env = hosts.mpi_env({**os.environ, "PYTHONPATH": str(ROOT)})
    # files, not pipes: the agent standing in for ssh hands them to host2's processes, which keep them open until
    # host2 is reachable again (a real ssh would not)
    with open(workdir / "out.txt", "w") as stdout, open(workdir / "err.txt", "w") as stderr:
        proc = subprocess.Popen(hosts.enter("host1") + [TMLAUNCHER, f"-cfg={cfg}"], cwd=workdir, env=env,
                                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
    try:
        deadline = time.time() + 240
        while not (run / "checkpoints" / "latest").exists():
            assert proc.poll() is None and time.time() < deadline, (workdir / "err.txt").read_text()
            time.sleep(0.1)
        set_links(hosts, "host2", "down")
        down = time.time()
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        set_links(hosts, "host2", "up")
    out, err = (workdir / "out.txt").read_text(), (workdir / "err.txt").read_text()
    assert proc.returncode == 0, err
    line = next(line for line in out.splitlines() if line.startswith("tmlauncher: restart 1"))
    assert "lost host host2: rank 2 (worker on host2:cpu0) not heard for 6 s" in line, out
    assert line.endswith("with 2 workers (was 3): host1:cpu0,cpu1"), line
    summary = json.loads((run / "summary.json").read_text())
    (restart,) = summary["restarts"]
    assert restart["lost_hosts"] == ["host2"] and restart["lost_ranks"] == [2], restart
    assert summary["workers"] == 2 and summary["final_val_accuracy"] >= 0.9, summary
    restarted = time.mktime(time.strptime(restart["time"], "%Y-%m-%dT%H:%M:%S+00:00")) - time.timezone
    assert restarted - down < 6 + 30  # WATCHDOG, then ending what was left (its grace) and planning again
    assert hosts.wait_idle(timeout=60) == {}  # host2's rank ends once its link is back
