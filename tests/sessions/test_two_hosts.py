"""Sessions across two hosts, proven on one machine: two network namespaces play host1 and host2.

host1 runs tmlauncher (and so mpiexec); mpiexec reaches host2 through tools/netsim_agent.sh, which
stands in for ssh, so the launcher's ordinary code path runs. host2 has its own /tmp: the run directory
(under /tmp) is not shared, as on hosts without a shared file system. MPI between the hosts can only go
over the hosts' links (TCP, through the cluster's bridge); the links' kernel counters show how much did.
See tests/assets/netns_hosts.py and tools/netsim_cluster.py for the setup; docs/several-hosts.md for what this
proves and what not.
(The pieces without namespaces: tests/launch/test_mpiexec.py, tests/session/test_remote.py.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ASSETS, ROOT, run_launcher, write_cfg

from theanompi.runtime.records import load_final_params

sys.path.insert(0, str(ASSETS))
from netns_hosts import TwoHosts

TMLAUNCHER = str(Path(sys.executable).parent / "tmlauncher")
TWO_HOSTS = "host1:cpu0,cpu1;host2:cpu0,cpu1"
ONE_HOST = "cpu0,cpu1,cpu2,cpu3"
TRAINING = dict(N_EPOCHS=6, MODEL_HIDDEN=64, MODEL_BATCH_SIZE=32)


@pytest.fixture(scope="module")
def workdir():
    """The sessions' working directory: outside /tmp, so it exists on both hosts (as a checkout would)."""
    path = Path(tempfile.mkdtemp(prefix="theanompi-two-hosts-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def private_tmp():
    """A directory under /tmp: host1's real /tmp here, while host2 has its own /tmp (not shared)."""
    path = Path(tempfile.mkdtemp(prefix="theanompi-two-hosts-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def launcher_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("THEANOMPI_CACHE_DIR", str(Path.home() / ".cache" / "theanompi"))
    return env


def launch_on_host1(hosts: TwoHosts, cfg: Path, workdir: Path, *flags: str, variables: dict | None = None,
                    **popen) -> subprocess.Popen:
    """tmlauncher, started on host1 as a user would start it there (``variables``: more of its environment, e.g.
    a batch job's)."""
    return subprocess.Popen(hosts.enter("host1", cwd=workdir) + [TMLAUNCHER, f"-cfg={cfg}", *flags],
                            env={**hosts.mpi_env(launcher_env()), **(variables or {})}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def read_on_host2(hosts: TwoHosts, path: Path) -> str | None:
    proc = hosts.run_in("host2", ["cat", str(path)], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# EASGD's first device is its server's: one more device on host1 keeps four workers, two on each host
@pytest.mark.parametrize("rule, keys, two, one", [
    ("BSP", {"BSP_SYNC_TYPE": "cdd"}, TWO_HOSTS, ONE_HOST),
    ("EASGD", {"EASGD_TAU": 2}, "host1:cpu0,cpu1,cpu2;host2:cpu0,cpu1", "cpu0,cpu1,cpu2,cpu3,cpu4"),
])
def test_rule_trains_over_two_hosts_as_on_one_with_tcp_between_them(hosts, workdir, private_tmp, rule, keys, two,
                                                                     one):
    run_dir = private_tmp / f"{rule.lower()}-two"
    cfg = write_cfg(workdir / f"{rule}-two.cfg", RULE=rule, DEVICES=two, RUN_DIR=run_dir, **TRAINING, **keys)
    before = hosts.link_bytes("host1")
    proc = launch_on_host1(hosts, cfg, workdir)
    out, err = proc.communicate(timeout=300)
    moved = hosts.link_bytes("host1") - before
    assert proc.returncode == 0, err
    assert hosts.wait_idle() == {}

    # every rank on host2 reported its end; its records are on host2, and only there
    first_remote = 3 if rule == "EASGD" else 2  # EASGD's server is session rank 0, on host1
    for index, rank in enumerate((first_remote, first_remote + 1)):
        who = f"rank {rank} (worker on host2:cpu{index})"
        assert f"tmlauncher: {who} finished (rank {rank} ran on host host2; its records are there, in {run_dir})" \
            in out, out
        assert read_on_host2(hosts, run_dir / "ranks" / f"rank-{rank}.done") == "ok\n"
        assert not (run_dir / "ranks" / f"rank-{rank}.pid").exists()
    assert (run_dir / "ranks" / "rank-0.done").exists()

    reference_dir = workdir / f"{rule.lower()}-one"
    one_cfg = write_cfg(workdir / f"{rule}-one.cfg", RULE=rule, DEVICES=one, RUN_DIR=reference_dir, **TRAINING,
                        **keys)
    reference, _ = run_launcher(f"-cfg={one_cfg}", cwd=workdir, timeout=300)
    assert reference.returncode == 0, reference.stderr
    two_hosts, one_host = summary(run_dir), summary(reference_dir)
    assert two_hosts["workers"] == one_host["workers"] == 4
    assert two_hosts["iterations"] == one_host["iterations"]
    param_bytes = sum(p.nbytes for p in load_final_params(run_dir))
    if rule == "BSP":  # each step's allreduce moves at least the whole vector across the link, each way
        crossings = 2 * two_hosts["iterations"]
    else:  # each exchange of a host2 worker sends its parameters to the server on host1 and gets the centre back
        crossings = 2 * sum(two_hosts["exchanges"][2:])
    assert crossings > 0
    assert moved >= crossings * param_bytes, f"{moved} bytes over the link, expected >= {crossings} x {param_bytes}"

    if rule == "BSP":  # synchronous: the same steps on the same data, summed in another order
        assert two_hosts["final_val_accuracy"] == pytest.approx(one_host["final_val_accuracy"], abs=0.01)
        for a, b in zip(load_final_params(run_dir), load_final_params(reference_dir)):
            assert abs(a - b).max() < 1e-3
        return
    # EASGD is asynchronous: the exchange order varies from run to run
    accuracies = two_hosts["final_val_accuracy"], one_host["final_val_accuracy"]
    # the server answers its workers in turn: before, a worker on the server's host could take nearly every
    # turn (exchanges per worker [1, 141, 1, 1]) and the centre ended far below the one-host run (0.40 vs 0.97)
    for record in (two_hosts, one_host):
        assert min(record["exchanges"]) > 1, record["exchanges"]
    assert min(accuracies) >= 0.88, accuracies
    assert accuracies[0] == pytest.approx(accuracies[1], abs=0.04)


def test_failing_rank_on_host_without_shared_run_dir_is_named_with_its_records(hosts, workdir, private_tmp):
    run_dir = private_tmp / "fails"
    cfg = write_cfg(workdir / "fails.cfg", DEVICES=TWO_HOSTS, RUN_DIR=run_dir, MODELFILE=ASSETS / "host_models.py",
                    MODELCLASS="FailsOnLastWorker", **TRAINING)
    proc = launch_on_host1(hosts, cfg, workdir)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode != 0
    message = "rank 3 (worker on host2:cpu1): RuntimeError: injected failure on host2"
    last = err.strip().splitlines()[-1]
    assert last == f"tmlauncher: session failed: {message} (rank 3 ran on host host2; its records are there, " \
                   f"in {run_dir})", last
    assert "tmlauncher: rank 3 (worker on host2:cpu1) failed (rank 3 ran on host host2" in out, out
    assert "tmlauncher: rank 2 (worker on host2:cpu0) " in out, out  # its end is reported too
    assert read_on_host2(hosts, run_dir / "ranks" / "rank-3.failed") == message + "\n"
    assert not (run_dir / "ranks" / "rank-3.failed").exists()  # host1 does not see host2's /tmp
    assert hosts.wait_idle() == {}


def test_killing_every_rank_of_host2_ends_the_session_naming_the_host(hosts, workdir, private_tmp):
    run_dir = private_tmp / "killed"
    cfg = write_cfg(workdir / "killed.cfg", DEVICES=TWO_HOSTS, RUN_DIR=run_dir,
                    MODELFILE=ASSETS / "contract_models.py", MODELCLASS="Napper", **{**TRAINING, "N_EPOCHS": 50})
    proc = launch_on_host1(hosts, cfg, workdir)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (run_dir / "iterations.jsonl").exists():  # rank 0 is training
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        victims = hosts.worker_pids("host2")
        assert len(victims) == 2, victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        killed = time.time()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.time() - killed < 30
    assert proc.returncode != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("tmlauncher: session failed: "), last
    # rank 0 usually notices the lost TCP peer first; otherwise mpiexec reports a killed rank itself
    assert ("lost host host2: rank 2 (worker on host2:cpu0), rank 3 (worker on host2:cpu1) stopped" in last
            or re.search(r"rank [23] \(worker on host2:cpu[01]\) died", last)), err
    assert hosts.wait_idle() == {}


def _pbs_job(workdir: Path) -> tuple[list[str], dict]:
    nodefile = workdir / "pbs_nodefile"
    nodefile.write_text("host1\nhost1\nhost2\nhost2\n")  # one line per allocated task
    return [], {"PBS_NODEFILE": str(nodefile)}


#: scheduler -> (builder(workdir) -> (flags, the job's variables), where the first line says the devices came from)
ALLOCATIONS = {
    "Slurm": (lambda workdir: ([], {"SLURM_JOB_NODELIST": "host[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}),
              "the Slurm allocation (SLURM_JOB_NODELIST=host[1-2], SLURM_TASKS_PER_NODE=2(x2))"),
    "PBS": (_pbs_job, "the PBS allocation (PBS_NODEFILE={workdir}/pbs_nodefile)"),
}


@pytest.mark.parametrize("scheduler", sorted(ALLOCATIONS))
def test_a_batch_jobs_allocation_places_the_workers_on_both_hosts(hosts, workdir, private_tmp, scheduler):
    build, source = ALLOCATIONS[scheduler]
    flags, variables = build(workdir)
    run_dir = private_tmp / f"{scheduler.lower()}-job"
    cfg = write_cfg(workdir / f"{scheduler}-job.cfg", DEVICES=None, RUN_DIR=run_dir, N_EPOCHS=2)
    proc = launch_on_host1(hosts, cfg, workdir, *flags, variables=variables)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert out.splitlines()[0] == f"tmlauncher: devices from {source.format(workdir=workdir)}: " \
                                  f"{TWO_HOSTS}", out
    for index, rank in enumerate((2, 3)):
        assert f"tmlauncher: rank {rank} (worker on host2:cpu{index}) finished (rank {rank} ran on host host2" in out
    assert summary(run_dir)["workers"] == 4
    assert hosts.wait_idle() == {}


def test_a_hostfile_over_two_hosts_places_the_ranks_there(hosts, workdir):
    hostfile = workdir / "hostfile"
    hostfile.write_text("# Open MPI's format\nhost1 slots=2\nhost2 slots=2 max_slots=8\n")
    cfg = write_cfg(workdir / "hostfile.cfg", DEVICES=None)
    proc = launch_on_host1(hosts, cfg, workdir, "--hostfile", str(hostfile), "--dry-run")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == f"tmlauncher: devices from --hostfile {hostfile}: {TWO_HOSTS}"
    contexts = [line for line in lines if line.lstrip().startswith(("-n 1", ": -n 1"))]
    assert ["--host host2:2" in line for line in contexts] == [False, False, True, True], contexts
    assert all("--host host1:2" in line for line in contexts[:2])  # this host's ranks are placed here explicitly
    remote = [line for line in lines if line.startswith("  rank 2 ") or line.startswith("  rank 3 ")]
    assert all("THEANOMPI_REMOTE_SPEC=<session.json, encoded, once written>" in line for line in remote), remote
    assert not (workdir / "runs").exists()
