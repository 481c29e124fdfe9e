"""tmlauncher inside a batch job's allocation on this host alone: the Slurm and PBS variables faked, an Open MPI
hostfile, DEVICES left out; an explicit DEVICES still wins; a malformed list or file is one line and exit 2.
``--dry-run``, ``--version`` and ``python -m theanompi``. (The same allocations over two hosts:
tests/sessions/test_two_hosts.py; the parsing alone: tests/launch/test_allocation.py.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_launcher, write_cfg

HERE = socket.gethostname()
#: what the two fakes of this host give: two cpu workers here
SLURM = {"SLURM_JOB_NODELIST": HERE, "SLURM_TASKS_PER_NODE": "2"}


def environment(**variables: str) -> dict[str, str]:
    """This process's environment without any real allocation's variables, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, **variables}


def pbs_nodefile(tmp_path: Path) -> str:
    path = tmp_path / "pbs_nodefile"
    path.write_text(f"{HERE}\n{HERE}\n")  # PBS writes a host once per allocated task
    return str(path)


@pytest.mark.parametrize("scheduler", ["Slurm", "PBS"])
def test_a_session_takes_its_workers_from_the_allocation(tmp_path, scheduler):
    variables = SLURM if scheduler == "Slurm" else {"PBS_NODEFILE": pbs_nodefile(tmp_path)}
    cfg = write_cfg(tmp_path / "job.cfg", DEVICES=None, RUN_DIR="run")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, env=environment(**variables))
    assert proc.returncode == 0, proc.stderr
    said = ", ".join(f"{k}={v}" for k, v in variables.items())
    first = proc.stdout.splitlines()[0]
    assert first == f"tmlauncher: devices from the {scheduler} allocation ({said}): {HERE}:cpu0,cpu1", first
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["workers"] == 2
    assert json.loads((tmp_path / "run" / "session.json").read_text())["devices"] == [f"{HERE}:cpu0", f"{HERE}:cpu1"]


def dry_run(tmp_path: Path, *args: str, cfg_keys: dict | None = None, **variables: str):
    cfg = write_cfg(tmp_path / "job.cfg", **{"DEVICES": None, **(cfg_keys or {})})
    proc, _ = run_launcher(f"-cfg={cfg}", "--dry-run", *args, cwd=tmp_path, env=environment(**variables))
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing started, no run directory
    return proc.stdout.splitlines()


def dry_run_line(lines: list[str]) -> str:
    """The dry run's summary line (after the devices line; a machine with fewer cores than ranks also warns)."""
    return next(line for line in lines[1:] if line.startswith("tmlauncher: dry run"))


def test_dry_run_prints_the_command_line_and_each_ranks_environment(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"# this machine, three slots\n{HERE} slots=3\n")
    lines = dry_run(tmp_path, "--hostfile", str(hostfile), cfg_keys={"THREADS_PER_WORKER": 1})
    assert lines[0] == f"tmlauncher: devices from --hostfile {hostfile}: {HERE}:cpu0,cpu1,cpu2"
    assert dry_run_line(lines).startswith("tmlauncher: dry run, nothing started: 3 ranks; RUN_DIR would be ")
    command = [line for line in lines if line.lstrip().startswith(("/", "-n", ": -n"))]
    assert command[0].startswith(str(Path(sys.executable).parent / "mpiexec")) and len(command) == 4
    assert all("-m theanompi.rules.rank_main" in line for line in command[1:])
    ranks = [line for line in lines if line.startswith("  rank ")]
    assert [line.split(":")[0] for line in ranks] == [f"  rank {r} (worker on {HERE}" for r in range(3)]
    assert all("OMP_NUM_THREADS=1" in line and "PYTHONPATH=" in line for line in ranks)


def test_an_explicit_devices_wins_over_the_allocation(tmp_path):
    lines = dry_run(tmp_path, "--devices", "cpu0,cpu1,cpu2", **SLURM)
    assert lines[0] == "tmlauncher: devices from DEVICES (the Slurm allocation is not used)"
    assert dry_run_line(lines).startswith("tmlauncher: dry run, nothing started: 3 ranks")


def _malformed_hostfile(tmp_path: Path) -> tuple[list[str], dict]:
    (tmp_path / "hosts").write_text("node1 slots=2\nnode2 slots=lots\n")
    return ["--hostfile", "hosts"], {}


def _empty_nodefile(tmp_path: Path) -> tuple[list[str], dict]:
    (tmp_path / "nodes").write_text("# nobody\n")
    return [], {"PBS_NODEFILE": str(tmp_path / "nodes")}


#: name -> (builder(tmp_path) -> (flags, variables), fragment of the one error line)
MALFORMED = {
    "unclosed Slurm node list": (lambda tmp: ([], {"SLURM_JOB_NODELIST": "node[01-04"}),
                                 "SLURM_JOB_NODELIST='node[01-04': '[' is not closed"),
    "Slurm range backwards": (lambda tmp: ([], {"SLURM_JOB_NODELIST": "node[7-4]"}), "range '7-4' runs backwards"),
    "tasks per node miscounted": (lambda tmp: ([], {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x3)"}),
                                  "SLURM_TASKS_PER_NODE='2(x3)': it counts tasks on 3 nodes, but the node list has 2"),
    "missing PBS nodefile": (lambda tmp: ([], {"PBS_NODEFILE": "no/such/nodefile"}),
                             "PBS_NODEFILE='no/such/nodefile': no such file"),
    "empty PBS nodefile": (_empty_nodefile, "lists no host"),
    "missing hostfile": (lambda tmp: (["--hostfile", "nowhere"], {}), "--hostfile nowhere: no such file"),
    "malformed hostfile": (_malformed_hostfile, "--hostfile hosts:2: 'slots=lots' needs a count >= 1 (slots=N)"),
    "no devices anywhere": (lambda tmp: ([], {}), "required key DEVICES is missing: give DEVICES (or --devices), "
                                                  "a --hostfile, or launch inside a Slurm or PBS allocation"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_allocation_is_one_line_and_exit_2(tmp_path, name):
    build, fragment = MALFORMED[name]
    flags, variables = build(tmp_path)
    cfg = write_cfg(tmp_path / "job.cfg", DEVICES=None)
    proc, _ = run_launcher(f"-cfg={cfg}", *flags, cwd=tmp_path, timeout=60, env=environment(**variables))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tmlauncher: error: ") and fragment in lines[0], proc.stderr
    assert proc.stdout == "" and not (tmp_path / "runs").exists()


def test_version_and_python_m_theanompi_are_tmlauncher(tmp_path):
    from theanompi import __version__

    proc, _ = run_launcher("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"tmlauncher (theanompi) {__version__}"
    synonym = [sys.executable, "-m", "theanompi"]
    same = subprocess.run([*synonym, "--version"], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env=environment())
    assert same.returncode == 0 and same.stdout == proc.stdout
    bad = subprocess.run([*synonym, "-cfg=nope.cfg"], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env=environment())
    assert bad.returncode == 2 and bad.stderr.strip() == "tmlauncher: error: cfg file 'nope.cfg' does not exist"
