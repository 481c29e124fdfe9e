"""tools/netsim.py: a cluster on one machine -- made and torn down on every path, its links' rates, its last line.

The tests that make namespaces need root; each skips with one line otherwise.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ASSETS, ROOT

sys.path.insert(0, str(ROOT / "tools"))
import netsim
import netsim_cluster
from netsim_cluster import Cluster, NotRoot, parse_rate

NETSIM = [sys.executable, str(ROOT / "tools" / "netsim.py")]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="netsim needs root (network namespaces, tc)")
TX_LINE = re.compile(r"^netsim: tx_bytes( host\d=\d+)+$")
#: what the command prints on host1: its host name, the hostfile, and where to look for leftovers afterwards
REPORT = ('hostname; cat "$NETSIM_HOSTFILE"; ip -o -4 addr show eth0 | tr -s " " | cut -d" " -f4; '
          'for f in "$NETSIM_HOSTS_DIR"/*/pid "$NETSIM_HOSTS_DIR"/switch.pid; do p=$(cat "$f"); '
          'echo "holder $p $(stat -L -c %i /proc/$p/ns/net)"; done')


def netsim_run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NETSIM, "run", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def root_state() -> dict[str, set[str]]:
    """What netsim must leave as it found it: named network namespaces, this namespace's links and qdiscs,
    netsim's directories under /run."""
    def lines(*argv: str) -> set[str]:
        return set(subprocess.run(argv, capture_output=True, text=True).stdout.splitlines())

    links = {line.split(":")[1].strip().split("@")[0] for line in lines("ip", "-o", "link") if ":" in line}
    return {"netns": lines("ip", "netns", "list"), "links": links, "qdiscs": lines("tc", "qdisc", "show"),
            "run": {p.name for p in Path("/run").glob("netsim-*")}}


def holders_of(stdout: str) -> dict[int, int]:
    """The holders' pids -> their network namespaces' inodes, as the command printed them."""
    return {int(pid): int(inode) for pid, inode in re.findall(r"^holder (\d+) (\d+)$", stdout, re.M)}


def assert_nothing_left(before: dict[str, set[str]], holders: dict[int, int]) -> None:
    assert holders, "the command did not report the cluster's holders"
    for pid in holders:
        assert not Path(f"/proc/{pid}").exists(), f"holder {pid} still runs"
    inodes = set(holders.values())
    inside = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "ns" / "net").stat().st_ino in inodes:
                inside.append(entry.name)
        except OSError:
            continue
    assert inside == [], f"processes still in the cluster's namespaces: {inside}"
    after = root_state()
    assert after["netns"] <= before["netns"]
    assert not {name for name in after["links"] - before["links"] if re.fullmatch(r"host\d|br0|eth0", name)}
    assert not [q for q in after["qdiscs"] - before["qdiscs"] if "tbf" in q]
    assert after["run"] <= before["run"]


# ----- without root ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", [netsim, netsim_cluster], ids=["netsim", "netsim_cluster"])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("args, message", [
    (["--hosts", "9", "--", "true"], "--hosts 9: a cluster has 2 to 8 hosts"),
    (["--hosts", "2", "--rate", "20mbps", "--", "true"], "rate '20mbps' is not NUMBER followed by bit"),
    (["--hosts", "2", "--rate-of", "host3=1mbit", "--", "true"], "--rate-of host3: no such host"),
    (["--hosts", "2", "--rate-of", "1mbit", "--", "true"], "--rate-of '1mbit': expected HOST=RATE"),
    (["--hosts", "2", "--"], "no command"),
    (["--hosts", "2", "--tcp-congestion", "no-such-cc", "--", "true"],
     "--tcp-congestion no-such-cc: this kernel has no such congestion control (it has "),
])
def test_bad_arguments_are_refused_in_one_line(monkeypatch, capsys, args, message):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(Cluster, "_build", lambda *a: pytest.fail("nothing may be made for bad arguments"))
    assert netsim.main(["run", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("netsim: error: ") and message in err[0], err


def test_without_root_it_says_so_in_one_line_and_makes_nothing(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert netsim.main(["run", "--hosts", "2", "--", "true"]) == 2
    assert capsys.readouterr().err == "netsim: error: needs root (network and mount namespaces, tc); run it as root\n"
    with pytest.raises(NotRoot, match="needs root"):
        Cluster.create(2)


@needs_root
def test_a_user_that_is_not_root_is_refused():
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *NETSIM, "run", "--hosts",
                           "2", "--", "true"], capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["netsim: error: needs root (network and mount namespaces, tc); run it as root"]


# ----- with root --------------------------------------------------------------------------------------------
@needs_root
@pytest.mark.parametrize("status", [0, 7])
def test_it_runs_the_command_on_host1_exits_with_its_status_and_leaves_nothing(status):
    before = root_state()
    proc = netsim_run("--hosts", "3", "--rate", "20mbit", "--rate-of", "host3=5mbit", "--slots", "2", "--",
                      "sh", "-c", f"{REPORT}; exit {status}")
    assert proc.returncode == status, proc.stderr
    out = proc.stdout.splitlines()
    assert out[:5] == ["host1", "host1 slots=2", "host2 slots=2", "host3 slots=2", "10.213.40.1/24"], out
    last = proc.stderr.strip().splitlines()[-1]
    assert TX_LINE.match(last) and [h for h, _ in re.findall(r"(host\d)=(\d+)", last)] == ["host1", "host2",
                                                                                            "host3"], last
    assert "host3 10.213.40.3 5mbit" in proc.stderr
    assert_nothing_left(before, holders_of(proc.stdout))


CONGESTION = "sysctl -n net.ipv4.tcp_congestion_control"


@needs_root
@pytest.mark.parametrize("chosen", [None, "reno"], ids=["kernel-default", "reno"])
def test_every_host_uses_the_tcp_congestion_control_chosen(chosen):
    """--tcp-congestion sets each host's own default (host2's read through the agent mpiexec uses); without it
    the hosts keep the kernel's."""
    expected = chosen or Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    proc = netsim_run("--hosts", "2", *(["--tcp-congestion", chosen] if chosen else []), "--", "sh", "-c",
                      f'{CONGESTION}; "$PRTE_MCA_plm_ssh_agent" host2 {CONGESTION}')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [expected, expected]
    assert f"on a bridge, TCP {expected}; hostfile" in proc.stderr


@needs_root
def test_a_command_that_cannot_run_fails_and_leaves_nothing():
    before = root_state()
    proc = netsim_run("--hosts", "2", "--", "/nonexistent/command")
    assert proc.returncode != 0
    assert TX_LINE.match(proc.stderr.strip().splitlines()[-1]), proc.stderr
    assert root_state()["run"] <= before["run"]


@needs_root
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_command_is_forwarded_and_everything_is_torn_down(sig):
    before = root_state()
    # exec: a signal between the shell's fork and the child's exec would be taken by the shell, not the sleep
    command = f"{REPORT}; echo started; exec sleep 60"
    proc = subprocess.Popen([*NETSIM, "run", "--hosts", "2", "--", "sh", "-c", command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        printed = []
        assert proc.stdout is not None
        for line in proc.stdout:
            printed.append(line)
            if line.strip() == "started":
                break
        start = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)  # netsim's grace is 30 s: a command that ignored it fails here
    finally:
        if proc.poll() is None:  # a second signal: netsim kills the command and tears the cluster down
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert time.monotonic() - start < 10
    assert proc.returncode == 128 + sig, err  # the shell ended by the signal netsim forwarded
    assert TX_LINE.match(err.strip().splitlines()[-1]), err
    assert_nothing_left(before, holders_of("".join(printed)))


@needs_root
def test_a_failure_while_making_the_cluster_removes_what_was_made(monkeypatch):
    before = root_state()
    made: list[int] = []
    start_holder = Cluster._holder

    def recording(self, name, flags):
        start_holder(self, name, flags)
        made.append(self.holders[name].pid)

    monkeypatch.setattr(Cluster, "_holder", recording)
    monkeypatch.setattr(netsim_cluster, "tbf_args", lambda bits: ["tbf", "rate", "fast"])  # tc refuses it
    with pytest.raises(OSError, match="tc qdisc replace"):
        Cluster.create(3, rate=parse_rate("20mbit"))
    assert len(made) == 4  # the switch and three hosts were running when tc failed
    for pid in made:
        assert not Path(f"/proc/{pid}").exists()
    assert root_state()["run"] <= before["run"]


def _throughput(cluster: Cluster, sender: str, receiver: str, seconds: float, port: int) -> tuple[float, float]:
    """TCP goodput from ``sender`` to ``receiver`` (Mbit/s, as received) and the rate on the sender's link (its
    tx counter over the same time, Mbit/s)."""
    probe = str(ASSETS / "throughput.py")
    address = cluster.addresses[receiver]
    recv = subprocess.Popen(cluster.enter(receiver) + [sys.executable, probe, "recv", address, str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        sent_before, start = cluster.tx_bytes(sender), time.perf_counter()
        cluster.run_in(sender, [sys.executable, probe, "send", address, str(port), str(seconds)], check=True,
                       timeout=60)
        result = json.loads(recv.communicate(timeout=30)[0])
        wire = (cluster.tx_bytes(sender) - sent_before) * 8 / (time.perf_counter() - start) / 1e6
    finally:
        if recv.poll() is None:
            recv.kill()
    return result["mbit_per_s"], wire


@needs_root
def test_a_links_rate_holds_for_what_a_host_sends_and_what_it_receives():
    cluster = Cluster.create(3, rate=parse_rate("20mbit"), rate_of={"host3": parse_rate("5mbit")})
    try:
        measured = {
            "host1->host2": _throughput(cluster, "host1", "host2", 2.5, 5201),  # 20 up, 20 down
            "host2->host1": _throughput(cluster, "host2", "host1", 2.5, 5202),
            "host1->host3": _throughput(cluster, "host1", "host3", 2.5, 5203),  # host3's download: 5
            "host3->host1": _throughput(cluster, "host3", "host1", 2.5, 5204),  # host3's upload: 5
        }
    finally:
        cluster.destroy()
    expected = {"host1->host2": 20, "host2->host1": 20, "host1->host3": 5, "host3->host1": 5}
    for pair, (goodput, _) in measured.items():  # TCP payload: ~4 % under the rate of Ethernet frames
        assert goodput == pytest.approx(expected[pair], rel=0.15), measured
    for pair in ("host1->host2", "host2->host1", "host3->host1"):  # the sender's own link is the bottleneck
        assert measured[pair][1] <= expected[pair] * 1.05, measured
