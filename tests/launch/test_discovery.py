"""Where an elastic session's restarts find devices (theanompi.launch.discovery): the host-discovery script, the
devices that failed and their cooldown. Sessions: tests/sessions/test_elastic.py."""

from __future__ import annotations

import socket

import pytest

from theanompi.core.devices import parse_devices
from theanompi.core.errors import ConfigError
from theanompi.launch.discovery import DeviceSource, Membership, discovered_devices, parse_host_slots, run_discovery

HERE = socket.gethostname()


def script(tmp_path, body: str):
    path = tmp_path / "discover.sh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path.name


@pytest.mark.parametrize("text, problem", [
    ("node1:0\n", "line 1: 'node1:0' is not host:slots (slots 1..4096)"),
    ("node1:two\n", "line 1: 'node1:two' is not host:slots"),
    ("node1:2\n-bad:1\n", "line 2: '-bad' is not a host name"),
    ("node1:99999\n", "line 1: 'node1:99999' is not host:slots (slots 1..4096)"),
])
def test_malformed_discovery_output_is_named_by_line(text, problem):
    with pytest.raises(ConfigError) as raised:
        parse_host_slots(text, "HOST_DISCOVERY='d.sh'")
    assert str(raised.value).startswith("HOST_DISCOVERY='d.sh': " + problem), raised.value


def test_a_host_listed_twice_has_its_slots_summed_and_no_host_is_no_slot():
    assert parse_host_slots("a:2\nb:1\na:1\n", "x") == [("a", 3), ("b", 1)]
    assert parse_host_slots("# nothing now\n\n", "x") == []


def test_discovery_runs_the_script_and_puts_this_host_first(tmp_path):
    name = script(tmp_path, f"echo node9:2; echo {HERE}:1")
    assert run_discovery(name, str(tmp_path)) == [("node9", 2), (HERE, 1)]
    assert discovered_devices(name, str(tmp_path), "cpu", {}) == f"{HERE}:cpu0;node9:cpu0,cpu1"
    assert discovered_devices(name, str(tmp_path), "cuda", {}) == f"{HERE}:cuda0;node9:cuda0,cuda1"


@pytest.mark.parametrize("body, said", [
    ("echo cannot reach the scheduler >&2; exit 3", "exit code 3: cannot reach the scheduler"),
    ("sleep 5", "still running after 1 s"),
    ("exec yes node1:1", "printed more than 1 MiB \\(stopped\\)"),
])
def test_a_failing_discovery_script_is_one_line(tmp_path, body, said):
    name = script(tmp_path, body)
    with pytest.raises(ConfigError, match=f"^HOST_DISCOVERY='{name}': {said}$"):
        run_discovery(name, str(tmp_path), timeout=1)


def test_failed_devices_and_hosts_come_back_after_the_cooldown_and_a_failing_source_keeps_its_last_answer():
    now = [0.0]
    answers = [parse_devices("cpu0,cpu1;node2:cpu0,cpu1")]

    def read():
        if not answers:
            raise ConfigError("HOST_DISCOVERY='d.sh': exit code 1")
        return answers.pop()

    members = Membership(read, cooldown=30.0, clock=lambda: now[0])
    members.fail(parse_devices("cpu1"), hosts=["node2"])
    assert [str(d) for d in members.available()] == ["cpu0"]
    assert members.left_out() == ["cpu1 (30 s more)", "host node2 (30 s more)"]
    now[0] = 29.0
    assert [str(d) for d in members.available()] == ["cpu0"]  # the source failed: its previous answer
    now[0] = 30.0
    assert [str(d) for d in members.available()] == ["cpu0", "cpu1", "node2:cpu0", "node2:cpu1"]
    assert members.left_out() == []


def test_a_restart_reads_the_hostfile_or_pbs_allocation_the_session_started_from_again(tmp_path):
    """Without HOST_DISCOVERY a restart re-reads the allocation: a node gone from the hostfile (or the PBS node
    file) is gone from the devices, one added is there."""
    hostfile, nodefile = tmp_path / "hosts", tmp_path / "nodes"
    hostfile.write_text("n1 slots=2\nn2 slots=1\n")
    nodefile.write_text("p1\np1\np2\n")
    from_hostfile = DeviceSource.allocation({}, str(hostfile))
    from_pbs = DeviceSource.allocation({"PBS_NODEFILE": str(nodefile)}, None)
    assert [str(d) for d in from_hostfile.read()] == ["n1:cpu0", "n1:cpu1", "n2:cpu0"]
    assert [str(d) for d in from_pbs.read()] == ["p1:cpu0", "p1:cpu1", "p2:cpu0"]
    hostfile.write_text("n1 slots=2\nn3 slots=1\n")
    nodefile.write_text("p1\np1\n")
    assert [str(d) for d in from_hostfile.read()] == ["n1:cpu0", "n1:cpu1", "n3:cpu0"]
    assert [str(d) for d in from_pbs.read()] == ["p1:cpu0", "p1:cpu1"]
    assert DeviceSource.allocation({}, None).read() == []  # no allocation at all: nothing offered
