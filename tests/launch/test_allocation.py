"""The devices of Slurm and PBS allocations and of Open MPI hostfiles (theanompi.launch.allocation), without a
scheduler: the variables are faked. Sessions started from them: tests/sessions/test_allocations.py and
tests/sessions/test_two_hosts.py."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from theanompi.core.devices import parse_devices
from theanompi.core.errors import ConfigError
from theanompi.launch.allocation import (
    allocation_source,
    expand_hostlist,
    expand_tasks_per_node,
    read_allocation,
)

HERE = socket.gethostname()


@pytest.mark.parametrize("text, hosts", [
    ("node01", ["node01"]),
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("node[8-11]", ["node8", "node9", "node10", "node11"]),  # no padding without a leading zero
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),
    ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
    ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    (" node[1, 3] ", ["node1", "node3"]),
    ("n.example.org", ["n.example.org"]),
])
def test_slurm_host_lists_expand(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, fragment", [
    ("", "the list is empty"),
    ("node[01-03", "'[' is not closed"),
    ("node01-03]", "']' without '['"),
    ("node[[1-2]]", "nested '['"),
    ("node[3-1]", "range '3-1' runs backwards"),
    ("node[a-b]", "'a-b' in [a-b] is not N or N-M"),
    ("node[1-]", "'1-' in [1-] is not N or N-M"),
    ("node[]", "'' in [] is not N or N-M"),
    ("a,,b", "empty entry between commas"),
    ("node[1-99999999]", "more than 100000 hosts"),
    ("bad!host", "'bad!host' is not a host name"),
])
def test_malformed_host_lists_are_refused(text, fragment):
    with pytest.raises(ConfigError) as err:
        expand_hostlist(text)
    assert str(err.value).startswith(f"host list {text!r}: ") and fragment in str(err.value), str(err.value)


@pytest.mark.parametrize("text, n, counts", [("2", 1, [2]), ("2(x3),1", 4, [2, 2, 2, 1]), ("1,4(x2)", 3, [1, 4, 4])])
def test_tasks_per_node(text, n, counts):
    assert expand_tasks_per_node(text, n) == counts


@pytest.mark.parametrize("text, n, fragment", [
    ("2(x3)", 2, "it counts tasks on 3 nodes, but the node list has 2"),
    ("2", 2, "it counts tasks on 1 nodes, but the node list has 2"),
    ("two", 1, "'two' is not N or N(xM)"),
    ("0", 1, "'0' is not N or N(xM)"),
    ("2(x0)", 1, "'2(x0)' is not N or N(xM)"),
])
def test_malformed_tasks_per_node(text, n, fragment):
    with pytest.raises(ConfigError, match=r"tasks per node") as err:
        expand_tasks_per_node(text, n)
    assert fragment in str(err.value)


def devices(environ, hostfile=None, scontrol=None):
    allocation = read_allocation(environ, hostfile, scontrol=scontrol)
    assert allocation is not None
    parse_devices(allocation.devices)  # always a DEVICES value the plan takes
    return allocation


def test_slurm_tasks_per_node_give_cpu_workers_this_host_first():
    allocation = devices({"SLURM_JOB_NODELIST": f"other[1-2],{HERE}", "SLURM_TASKS_PER_NODE": "2(x2),3"})
    assert allocation.devices == f"{HERE}:cpu0,cpu1,cpu2;other1:cpu0,cpu1;other2:cpu0,cpu1"
    assert allocation.source == (f"the Slurm allocation (SLURM_JOB_NODELIST=other[1-2],{HERE}, "
                                 "SLURM_TASKS_PER_NODE=2(x2),3)")


def test_slurm_ntasks_per_node_and_the_older_nodelist_variable():
    allocation = devices({"SLURM_NODELIST": "n[1-2]", "SLURM_NTASKS_PER_NODE": "2"})
    assert allocation.devices == "n1:cpu0,cpu1;n2:cpu0,cpu1"
    assert devices({"SLURM_JOB_NODELIST": "n[1-2]"}).devices == "n1:cpu0;n2:cpu0"  # one task per node


@pytest.mark.parametrize("gpus", [{"SLURM_GPUS_ON_NODE": "4"}, {"SLURM_JOB_GPUS": "2,3,5,7"}])
def test_slurm_gpus_give_one_cuda_worker_per_gpu(gpus):
    allocation = devices({"SLURM_JOB_NODELIST": "g[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)", **gpus})
    assert allocation.devices == "g1:cuda0,cuda1,cuda2,cuda3;g2:cuda0,cuda1,cuda2,cuda3"
    assert next(iter(gpus)) in allocation.source


def test_slurm_node_name_of_this_host_is_this_host():
    """Slurm may name this node otherwise than its host name (SLURMD_NODENAME; a short or long name)."""
    allocation = devices({"SLURM_JOB_NODELIST": "n1,n2", "SLURMD_NODENAME": "n2"})
    assert allocation.devices == f"{HERE}:cpu0;n1:cpu0"
    assert parse_devices(allocation.devices)[0].is_local
    assert devices({"SLURM_JOB_NODELIST": f"{HERE.split('.')[0]}.cluster.example"}).devices == f"{HERE}:cpu0"


def test_scontrol_expands_the_list_when_present(tmp_path):
    scontrol = tmp_path / "scontrol"
    log = tmp_path / "asked"
    scontrol.write_text(f'#!/bin/sh\necho "$@" > {log}\nprintf "alpha\\nbeta\\n"\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    allocation = read_allocation({"SLURM_JOB_NODELIST": "whatever[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)"},
                                 scontrol=str(scontrol))
    assert allocation.devices == "alpha:cpu0;beta:cpu0"
    assert log.read_text().split() == ["show", "hostnames", "whatever[1-2]"]
    scontrol.write_text('#!/bin/sh\necho "scontrol: error: Invalid hostlist" >&2\nexit 1\n')
    with pytest.raises(ConfigError, match=r"SLURM_JOB_NODELIST='x\[': 'scontrol show hostnames' refused it: "
                                          r"scontrol: error: Invalid hostlist"):
        read_allocation({"SLURM_JOB_NODELIST": "x["}, scontrol=str(scontrol))


def test_scontrol_is_looked_for_on_path(tmp_path, monkeypatch):
    scontrol = tmp_path / "scontrol"
    scontrol.write_text('#!/bin/sh\nprintf "from-scontrol\\n"\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert read_allocation({"SLURM_JOB_NODELIST": "n1"}).devices == "from-scontrol:cpu0"


@pytest.mark.parametrize("environ, fragment", [
    ({"SLURM_JOB_NODELIST": "n[1-2", "SLURM_TASKS_PER_NODE": "1"}, "SLURM_JOB_NODELIST='n[1-2': '[' is not closed"),
    ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1(x3)"},
     "SLURM_TASKS_PER_NODE='1(x3)': it counts tasks on 3 nodes, but the node list has 2"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS_PER_NODE": "zero"}, "SLURM_NTASKS_PER_NODE='zero' is not a count"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_JOB_GPUS": "0,gpu1"}, "SLURM_JOB_GPUS='0,gpu1' is not a list of GPU ids"),
    ({"SLURM_JOB_NODELIST": "n1", "SLURM_GPUS_ON_NODE": "-1"}, "SLURM_GPUS_ON_NODE='-1' is not a count"),
])
def test_malformed_slurm_variables_are_named(environ, fragment):
    with pytest.raises(ConfigError) as err:
        read_allocation(environ, scontrol=None)
    assert fragment in str(err.value), str(err.value)


def test_pbs_nodefile_gives_one_worker_per_line(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text(f"n2\nn2\n{HERE}\nn3\n\n{HERE}\n")
    allocation = devices({"PBS_NODEFILE": str(nodefile)})
    assert allocation.devices == f"{HERE}:cpu0,cpu1;n2:cpu0,cpu1;n3:cpu0"
    assert allocation.source == f"the PBS allocation (PBS_NODEFILE={nodefile})"


def test_torque_gpufile_gives_cuda_workers(tmp_path):
    (tmp_path / "nodes").write_text("n1\nn2\n")
    (tmp_path / "gpus").write_text("n1-gpu0\nn1-gpu1\nn2-gpu1\n")
    allocation = devices({"PBS_NODEFILE": str(tmp_path / "nodes"), "PBS_GPUFILE": str(tmp_path / "gpus")})
    assert allocation.devices == "n1:cuda0,cuda1;n2:cuda1"


@pytest.mark.parametrize("content, fragment", [
    (None, "PBS_NODEFILE='{path}': no such file"),
    ("\n# nothing\n", "PBS_NODEFILE='{path}': lists no host"),
    ("n1\nnot a host\n", "PBS_NODEFILE='{path}':2: 'not a host' is not a host name"),
])
def test_malformed_pbs_nodefile_is_named(tmp_path, content, fragment):
    path = tmp_path / "nodes"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as err:
        read_allocation({"PBS_NODEFILE": str(path)})
    assert fragment.format(path=path) in str(err.value)


def test_hostfile_in_open_mpis_format(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"# the cluster\nn1 slots=2 max_slots=4\n{HERE} slots=2  # this one\nn2\nn1 slots=1\n")
    allocation = devices({}, hostfile=str(hostfile))
    assert allocation.devices == f"{HERE}:cpu0,cpu1;n1:cpu0,cpu1,cpu2;n2:cpu0"
    assert allocation.source == f"--hostfile {hostfile}"


def test_a_hostfile_wins_over_the_schedulers_allocation(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n9 slots=1\n")
    environ = {"SLURM_JOB_NODELIST": "n1", "PBS_NODEFILE": "/nowhere"}
    assert allocation_source(environ, str(hostfile)) == f"--hostfile {hostfile}"
    assert devices(environ, hostfile=str(hostfile)).devices == "n9:cpu0"
    assert allocation_source(environ, None) == "the Slurm allocation"
    assert allocation_source({}, None) is None and read_allocation({}) is None


@pytest.mark.parametrize("content, fragment", [
    (None, "--hostfile {path}: no such file"),
    ("", "--hostfile {path}: lists no host"),
    ("n1 slots=two\n", "--hostfile {path}:1: 'slots=two' needs a count >= 1 (slots=N)"),
    ("n1 slots=0\n", "--hostfile {path}:1: 'slots=0' needs a count >= 1"),
    ("n1\nn2 cpus=4\n", "--hostfile {path}:2: 'cpus=4' is not one of slots=N, max_slots=N, max-slots=N"),
    ("n1 slots\n", "--hostfile {path}:1: 'slots' needs a count >= 1"),
    ("-n1 slots=2\n", "--hostfile {path}:1: '-n1' is not a host name"),
])
def test_malformed_hostfile_is_named_with_its_line(tmp_path, content, fragment):
    path = tmp_path / "hosts"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as err:
        read_allocation({}, hostfile=str(path))
    assert fragment.format(path=path) in str(err.value)
