"""Allocations and cfgs that ask for too much or name a host twice, and files that are not files, under real
tmlauncher sessions (issue 39, items 5, 6, 7 and 8): each is one line and exit 2 before anything is written, or
the session it asks for. (The parsing alone: tests/launch/test_hosts_once_and_command_line.py.)"""

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
SHORT = HERE.split(".")[0]


pytestmark = pytest.mark.usefixtures("ends_its_processes")  # kills what a failed launch leaves


def environment(**variables: str) -> dict[str, str]:
    """This process's environment without any real allocation's variables, plus ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, **variables}


#: tmlauncher's main in a Python whose every way of starting a process, but for the C++ compiler probes PyTensor
#: makes on import, fails the launch (exit 99) before anything is forked: a launch these tests expect refused
#: (hundreds of ranks asked for) can never start mpiexec or a rank, even if the bound it tests stopped working
_NO_SPAWN_LAUNCHER = """\
import os, subprocess, sys
def _refuse(*args, **kwargs):
    sys.stderr.write(f"test guard: this launch tried to start a process: {args[:1]!r}\\n")
    os._exit(99)
_execute_child = subprocess.Popen._execute_child
def _compilers_only(self, args, *rest, **kwargs):
    program = os.path.basename(str(args if isinstance(args, (str, bytes)) else args[0]))
    if program not in ("g++", "c++", "gcc", "cc", "clang", "clang++"):
        _refuse(args)
    return _execute_child(self, args, *rest, **kwargs)
subprocess.Popen._execute_child = _compilers_only
for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve", "execvp", "execvpe"):
    if hasattr(os, name):
        setattr(os, name, _refuse)
from theanompi.launch.cli import main
sys.argv[0] = "tmlauncher"
sys.exit(main())
"""


def launch_without_spawning(cwd: Path, *args: str, env: dict[str, str], timeout: float = 60
                            ) -> subprocess.CompletedProcess:
    """``tmlauncher ARGS`` run as ``_NO_SPAWN_LAUNCHER``: exit 99 the moment it tries to start any process."""
    return subprocess.run([sys.executable, "-c", _NO_SPAWN_LAUNCHER, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL, env=env)


def refused(tmp_path: Path, *flags: str, cfg_keys: dict | None = None, **variables: str) -> str:
    """The one line of a launch that must be refused before anything is written or any process is started (the
    launcher runs without the means to start one: see ``_NO_SPAWN_LAUNCHER``)."""
    cfg = write_cfg(tmp_path / "job.cfg", **{"DEVICES": None, "RUN_DIR": "run", **(cfg_keys or {})})
    proc = launch_without_spawning(tmp_path, f"-cfg={cfg}", *flags, env=environment(**variables))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("tmlauncher: error: "), proc.stderr
    assert not (tmp_path / "run").exists(), "something was written"
    return lines[0]


def test_the_guard_of_refused_launches_stops_one_that_would_start_ranks(tmp_path):
    """The guard itself can fail a test: a launch that is not refused ends at its first process, exit 99."""
    cfg = write_cfg(tmp_path / "job.cfg", RUN_DIR="run", N_EPOCHS=1)
    proc = launch_without_spawning(tmp_path, f"-cfg={cfg}", env=environment())
    assert proc.returncode == 99 and "test guard: this launch tried to start a process" in proc.stderr, proc.stderr


# ----- one machine, several names -------------------------------------------------------------------------------------
def test_this_machine_under_two_names_gets_every_slot_of_both(tmp_path):
    """Its short name with 1 slot and a long name with 2 (and localhost): all of this machine's 3 ranks start."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"{SHORT} slots=1\n{SHORT}.tm39.example slots=1\nlocalhost slots=1\n")
    cfg = write_cfg(tmp_path / "job.cfg", DEVICES=None, RUN_DIR="run", N_EPOCHS=1)
    proc, _ = run_launcher(f"-cfg={cfg}", "--hostfile", str(hostfile), cwd=tmp_path, env=environment())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"tmlauncher: devices from --hostfile {hostfile}: {HERE}:cpu0,cpu1,cpu2"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["workers"] == 3
    assert "DEVICES" not in proc.stdout + proc.stderr


def test_another_machine_under_a_short_and_a_long_name_is_refused_naming_both_lines(tmp_path):
    """(A dry run: were the hostfile taken, nothing would start, and no name would be looked up.)"""
    (tmp_path / "hosts").write_text(f"{HERE} slots=1\nnode7 slots=2\nnode7.cluster.example slots=2\n")
    line = refused(tmp_path, "--hostfile", "hosts", "--dry-run")
    assert line == ("tmlauncher: error: hosts:2 ('node7') and hosts:3 ('node7.cluster.example') name the same machine "
                    "by a short and a long name: name it once"), line


def test_a_gpu_of_this_machine_given_twice_is_refused_naming_both_places(tmp_path):
    (tmp_path / "nodes").write_text(f"{HERE}\nlocalhost\n")
    (tmp_path / "gpus").write_text(f"{HERE}-gpu0\nlocalhost-gpu0\n")
    line = refused(tmp_path, PBS_NODEFILE=str(tmp_path / "nodes"), PBS_GPUFILE=str(tmp_path / "gpus"))
    assert "give this machine's cuda0 twice" in line and "gpus'" in line and "DEVICES" not in line, line


# ----- bounds ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["Slurm", "hostfile", "PBS node file", "DEVICES"])
def test_an_allocation_past_max_ranks_per_host_is_refused_before_anything_is_written(tmp_path, case):
    flags: list[str] = []
    variables: dict[str, str] = {}
    keys: dict = {}
    if case == "Slurm":
        variables = {"SLURM_JOB_NODELIST": HERE, "SLURM_TASKS_PER_NODE": "99999"}
        said = "SLURM_TASKS_PER_NODE='99999': 99999 tasks on a node, more than a session's 65536 ranks"
    elif case == "hostfile":
        (tmp_path / "hosts").write_text(f"{HERE} slots=500\n")
        flags = ["--hostfile", "hosts"]
        said = f"--hostfile hosts:1: 500 ranks on this host ({HERE}), more than MAX_RANKS_PER_HOST (by default 8 x"
    elif case == "PBS node file":
        (tmp_path / "nodes").write_text(f"{HERE}\n" * 300)
        variables = {"PBS_NODEFILE": str(tmp_path / "nodes")}
        said = "300 ranks on this host"
    else:
        keys = {"DEVICES": ",".join(f"cpu{i}" for i in range(200))}
        said = "DEVICES: 200 ranks on this host, more than MAX_RANKS_PER_HOST"
    line = refused(tmp_path, *flags, cfg_keys=keys, **variables)
    assert said in line, line
    if case != "Slurm":
        assert line.endswith("To start them, set MAX_RANKS_PER_HOST=" + line.split(" ranks on ")[0].split()[-1])


def test_max_ranks_per_host_forces_a_large_allocation_whose_command_line_is_shortened(tmp_path):
    """Forced, 20,000 ranks on two other hosts are planned; the command line takes the rank-count form, within the
    system's limit (the dry run starts nothing: it runs without the means to)."""
    (tmp_path / "hosts").write_text(f"{HERE} slots=2\nnode1 slots=10000\nnode2 slots=10000\n")
    cfg = write_cfg(tmp_path / "job.cfg", DEVICES=None, MAX_RANKS_PER_HOST=10000)
    proc = launch_without_spawning(tmp_path, f"-cfg={cfg}", "--hostfile", "hosts", "--dry-run", env=environment(),
                                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    command = [line for line in proc.stdout.splitlines() if line.lstrip().startswith(("/", "-n", ": -n"))]
    assert len(command) == 4 and "-n 10000 --host node1:10000" in command[2], command[:3]
    assert sum(len(line) for line in command) < os.sysconf("SC_ARG_MAX")
    assert len([line for line in proc.stdout.splitlines() if line.startswith("  rank ")]) == 20002


def test_a_command_line_past_the_limit_goes_into_an_app_file(tmp_path):
    """With the system's limit pretended tiny, the ranks' app contexts go into RUN_DIR/mpiexec.app and the session
    runs from it."""
    script = tmp_path / "launch.py"
    script.write_text("import sys\nimport theanompi.launch.command_line as cl\ncl.arg_max = lambda: 1\n"
                      "from theanompi import BSP\nrule = BSP()\n"
                      "rule.init(devices='cpu0,cpu1', modelfile='theanompi.models.mlp', modelclass='MLP', n_epochs=1, "
                      "run_dir='run', plots=False)\nsys.exit(rule.wait())\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env=environment())
    assert proc.returncode == 0, proc.stderr
    app = (tmp_path / "run" / "mpiexec.app").read_text().splitlines()
    assert len(app) == 1 and app[0].startswith("-n 2 ") and app[0].endswith("session.json")


# ----- files that are not files ---------------------------------------------------------------------------------------
def test_a_hostfile_or_node_file_that_never_ends_or_blocks_is_refused_at_once(tmp_path):
    line = refused(tmp_path, "--hostfile", "/dev/zero")
    assert line == "tmlauncher: error: --hostfile '/dev/zero' is a character device, not a regular file", line
    os.mkfifo(tmp_path / "nodes")
    line = refused(tmp_path, PBS_NODEFILE=str(tmp_path / "nodes"))
    assert line == f"tmlauncher: error: PBS_NODEFILE '{tmp_path}/nodes' is a FIFO (named pipe), not a regular file"
    (tmp_path / "huge").write_bytes(b"# " + b"x" * (17 << 20) + b"\n")
    line = refused(tmp_path, "--hostfile", "huge")
    assert "--hostfile 'huge' is larger than 16,777,216 bytes" in line, line


# ----- option values: the extremes that reach C -----------------------------------------------------------------------
@pytest.mark.parametrize("key, value, said", [
    ("SEED", str(2**64), "SEED='18446744073709551616' is not allowed; use an integer from 0 to 4294967295"),
    ("BSP_BUCKET_MB", "1e12", "BSP_BUCKET_MB='1e12' is not allowed; use 0, or a number from 0.001 to 4096"),
    ("BSP_BUCKET_MB", "1e-320", "BSP_BUCKET_MB='1e-320' is not allowed; use 0, or a number from 0.001 to 4096"),
])
def test_a_value_past_what_its_use_takes_is_one_line_at_launch(tmp_path, key, value, said):
    line = refused(tmp_path, cfg_keys={"DEVICES": "cpu0,cpu1", key: value})
    assert line == f"tmlauncher: error: {said}", line


def test_the_largest_seed_trains_a_pytorch_model(tmp_path):
    pytest.importorskip("torch")
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=str(ROOT / "examples" / "torch_digits.py"), MODELCLASS="DigitsCNN",
                    MODEL_BATCH_SIZE=16, SEED=2**32 - 1, N_EPOCHS=1, RUN_DIR="run")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
