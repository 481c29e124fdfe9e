"""Allocations name each machine once and ask for no more ranks than a host takes (theanompi.launch.allocation,
issue 39 items 6 and 8), and mpiexec's command line fits the system's limit (theanompi.launch.command_line).
Sessions: tests/sessions/test_allocation_bounds.py."""

from __future__ import annotations

import os
import socket

import pytest

from theanompi.core.devices import parse_devices
from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import UnexpectedEntry
from theanompi.launch import command_line
from theanompi.launch.allocation import read_allocation
from theanompi.launch.command_line import fit_command_line, rank_count_form
from theanompi.launch.mpiexec import mpiexec_command
from theanompi.launch.startup import daemon_failure, ssh_options
from theanompi.session.spec import RankSpec

HERE = socket.gethostname()


@pytest.mark.parametrize("lines, devices", [
    ([f"{HERE} slots=1", f"{HERE}.cluster.example slots=3"], f"{HERE}:cpu0,cpu1,cpu2,cpu3"),
    (["localhost slots=2", f"{HERE} slots=1", "n1"], f"{HERE}:cpu0,cpu1,cpu2;n1:cpu0"),
    (["127.0.0.1", "n1", "localhost"], f"{HERE}:cpu0,cpu1;n1:cpu0"),
])
def test_every_name_of_this_machine_is_this_machine(tmp_path, lines, devices):
    (tmp_path / "hosts").write_text("\n".join(lines) + "\n")
    assert read_allocation({}, hostfile=str(tmp_path / "hosts")).devices == devices


def test_slurm_naming_this_node_twice_sums_its_tasks():
    allocation = read_allocation({"SLURM_JOB_NODELIST": f"localhost,{HERE}", "SLURM_TASKS_PER_NODE": "1(x2)"},
                                 scontrol=None)
    assert allocation.devices == f"{HERE}:cpu0,cpu1"


def test_a_machine_under_a_short_and_a_long_name_is_named_by_both_lines(tmp_path):
    (tmp_path / "hosts").write_text("n1\nn2 slots=2\nn1.cluster slots=1\n")
    with pytest.raises(ConfigError, match=r"^.*/hosts:1 \('n1'\) and .*/hosts:3 \('n1.cluster'\) name the same "
                                          r"machine by a short and a long name: name it once$"):
        read_allocation({}, hostfile=str(tmp_path / "hosts"))
    (tmp_path / "hosts").write_text("n1.a\nn1.b\n")  # two clusters' n1: two machines
    assert read_allocation({}, hostfile=str(tmp_path / "hosts")).devices == "n1.a:cpu0;n1.b:cpu0"


def test_slurm_gpus_of_this_machine_under_two_names_are_refused_naming_the_variable():
    environ = {"SLURM_JOB_NODELIST": f"localhost,{HERE}", "SLURM_GPUS_ON_NODE": "2"}
    with pytest.raises(ConfigError, match=r"SLURM_GPUS_ON_NODE='2' \(cuda0 on localhost\) and SLURM_GPUS_ON_NODE='2' "
                                          rf"\(cuda0 on {HERE}\) give this machine's cuda0 twice"):
        read_allocation(environ, scontrol=None)


@pytest.mark.parametrize("environ, fragment", [
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "99999"},
     "SLURM_TASKS_PER_NODE='99999': 99999 tasks on a node, more than a session's 65536 ranks"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "40"},
     "SLURM_TASKS_PER_NODE='40': 40 ranks on n1, more than MAX_RANKS_PER_HOST=32: a typo? To start them, set "
     "MAX_RANKS_PER_HOST=40"),
    ({"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_NTASKS_PER_NODE": "33"}, "SLURM_NTASKS_PER_NODE='33': 33 ranks on n1"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_GPUS_ON_NODE": "10000000"}, "SLURM_GPUS_ON_NODE='10000000': more than"),
])
def test_counts_past_the_limit_name_where_they_came_from(environ, fragment):
    with pytest.raises(ConfigError) as err:
        read_allocation(environ, scontrol=None, max_per_host=32)
    assert fragment in str(err.value), str(err.value)


def test_a_hostfile_over_the_limit_names_its_line_and_lines_of_one_host_add_up(tmp_path):
    (tmp_path / "hosts").write_text("n1 slots=20\nn2\nn1 slots=20\n")
    with pytest.raises(ConfigError, match=r"hosts:3: 40 ranks on n1, more than MAX_RANKS_PER_HOST=32"):
        read_allocation({}, hostfile=str(tmp_path / "hosts"), max_per_host=32)
    assert read_allocation({}, hostfile=str(tmp_path / "hosts"), max_per_host=40).devices.count("cpu") == 41


def test_node_files_must_be_regular_files(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnexpectedEntry, match=r"^PBS_NODEFILE '.*/fifo' is a FIFO \(named pipe\), not a regular file$"):
        read_allocation({"PBS_NODEFILE": str(tmp_path / "fifo")})


# ----- the command line -----------------------------------------------------------------------------------------------
def _ranks(devices: str) -> list[RankSpec]:
    return [RankSpec(d, "worker") for d in parse_devices(devices)]


def test_the_command_line_keeps_one_context_per_rank_while_it_fits():
    argv = mpiexec_command(_ranks("cpu0,cpu1,cpu2"), "/r/session.json", bind="none", mpiexec="mpiexec",
                           python="python", cpu_count=4)
    assert argv.count(":") == 2 and argv.count("1") >= 3


def test_thousands_of_ranks_take_the_rank_count_form_within_the_limit():
    ranks = _ranks("node1:" + ",".join(f"cpu{i}" for i in range(20000)) + ";node2:cpu0,cpu1")
    argv = mpiexec_command(ranks, "/r/session.json", bind="none", mpiexec="mpiexec", python="python", cpu_count=4)
    assert command_line.fits(argv, os.environ) and argv.count(":") == 1
    assert argv[argv.index("-n") + 1] == "20000"


def test_contexts_that_differ_go_into_an_app_file_and_else_a_clear_error(monkeypatch):
    ranks = _ranks("node1:" + ",".join(f"cuda{i}" for i in range(3000)))
    argv = mpiexec_command(ranks, "/r/session.json", bind="none", mpiexec="mpiexec", python="python", cpu_count=4)
    monkeypatch.setattr(command_line, "arg_max", lambda: 200_000)
    fitted, app = fit_command_line(argv, {}, "/r/mpiexec.app")
    assert fitted[-2:] == ["--app", "/r/mpiexec.app"] and app is not None and len(app.splitlines()) == 3000
    assert rank_count_form(argv) == argv  # no two alike
    with pytest.raises(ConfigError, match=r"^mpiexec's command line for 3000 ranks would take .* bytes .* its app "
                                          r"contexts do not fit an app file"):
        fit_command_line([*argv[:-1], "x" * 2000], {}, "/r/mpiexec.app")


# ----- ssh and start-up -----------------------------------------------------------------------------------------------
def test_ssh_gets_a_connect_timeout_and_batch_mode_unless_the_user_configured_it():
    assert ssh_options({}, 8) == {"PRTE_MCA_plm_ssh_args": "-x -o ConnectTimeout=4 -o BatchMode=yes"}
    assert ssh_options({}, 0)["PRTE_MCA_plm_ssh_args"].endswith("ConnectTimeout=30 -o BatchMode=yes")
    assert ssh_options({"PRTE_MCA_plm_ssh_agent": "/usr/bin/ssh"}, 8) != {}
    assert ssh_options({"PRTE_MCA_plm_ssh_agent": "ssh -p 2222"}, 8) == {}
    assert ssh_options({"OMPI_MCA_plm_ssh_args": "-q"}, 8) == {}


@pytest.mark.parametrize("tail, fragment", [
    ("ssh: connect to host 10.0.0.9 port 22: No route to host\n", "the host cannot be reached from here"),
    ("root@n9: Permission denied (publickey).\n", "cannot log in without a password"),
    ("Connection timed out during banner exchange\nConnection to n9 port 22 timed out\n", "does not answer"),
])
def test_a_daemon_that_did_not_start_is_named_with_the_likely_cause(tail, fragment):
    host = "10.0.0.9" if "10.0.0.9" in tail else "n9"
    line = daemon_failure(tail, 255, [host])
    assert line is not None and line.startswith(f"mpiexec's daemon on {host} did not start: ") and fragment in line
    assert daemon_failure("some other failure\n", 1, [host]) is None
