"""netsim: a cluster on one machine, to rehearse a multi-host session with real link limits.

    python tools/netsim.py run --hosts N [--rate RATE] [--rate-of HOST=RATE ...] [--slots S] [--share PATH ...]
                               [--subnet CIDR] -- COMMAND [ARG ...]

makes N hosts (2-8) ``host1`` .. ``hostN``, each a network + UTS + mount namespace with its own address
(10.213.40.K by default), its own host name and its own /tmp, joined through a bridge; limits every host's link to
RATE in both directions (``tc`` token buckets; ``--rate-of host2=5mbit`` gives one host its own rate); writes an
Open MPI hostfile (``hostK slots=S``) whose path the command finds in ``$NETSIM_HOSTFILE``; runs COMMAND on host1
with what mpiexec needs to reach the other hosts (an agent that stands in for ssh, MPI over the hosts' links); then
tears everything down -- after the command exits, fails, or is interrupted (Ctrl-C, SIGTERM: forwarded to the
command, which gets 30 s before it is killed) -- and exits with the command's status. Its last line (stderr) is the
bytes each host's link sent, from the kernel's counters (``/sys/class/net/eth0/statistics/tx_bytes``):

    netsim: tx_bytes host1=48213 host2=51877

Needs root. Links have a rate only: netem (delay, loss) is not in every kernel (this one answers
``tc qdisc add ... netem`` with "Specified qdisc kind is unknown"). How the cluster is made: tools/netsim_cluster.py;
a rehearsal of a session: docs/several-hosts.md.

Example
-------
>>> main(["run", "--hosts", "9", "--", "true"])                      # doctest: +SKIP
netsim: error: --hosts 9: a cluster has 2 to 8 hosts
2
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netsim_cluster import MAX_HOSTS, Cluster, NotRoot, format_rate, parse_rate

#: seconds an interrupted command gets to end before it is killed
GRACE_S = 30.0
NETSIM_ERROR = 2


class Interrupted(Exception):
    """A signal arrived while the cluster was being made."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="netsim", description="A cluster on one machine: N hosts (network + UTS + mount namespaces, a private "
        "/tmp each) joined through a bridge, every link limited with tc (tbf; netem is not in this kernel, so no "
        "delay or loss), running COMMAND on host1. Needs root.")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="make the hosts, run COMMAND on host1, tear everything down",
                         description="Make the hosts, run COMMAND on host1 with $NETSIM_HOSTFILE (an Open MPI "
                         "hostfile) and what mpiexec needs to reach the other hosts, tear everything down, exit "
                         "with COMMAND's status; the last line is each host's tx_bytes. Links are limited with tbf "
                         "in both directions (netem is not in this kernel: rates only, no delay or loss).")
    run.add_argument("--hosts", type=int, required=True, help=f"number of hosts, 2 to {MAX_HOSTS}")
    run.add_argument("--rate", default="unlimited",
                     help="every host's link rate, each way: e.g. 20mbit, 100mbit, 1gbit, or unlimited (default)")
    run.add_argument("--rate-of", action="append", default=[], metavar="HOST=RATE",
                     help="one host's own rate, e.g. host2=5mbit (repeatable)")
    run.add_argument("--slots", type=int, default=1, help="slots per host in the hostfile (default 1)")
    run.add_argument("--share", action="append", default=[], metavar="PATH",
                     help="a path under /tmp every host must see (the working directory, the Python environment, "
                          "THEANOMPI_CACHE_DIR and PYTHONPATH are kept already)")
    run.add_argument("--tcp-congestion", metavar="NAME",
                     help="the hosts' TCP congestion control, e.g. reno (default: the kernel's, often cubic or bbr; "
                          "see docs/several-hosts.md for why it matters on a link busy both ways)")
    run.add_argument("--subnet", default="10.213.40.0/24", help="the hosts' subnet (default 10.213.40.0/24)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...], run on host1")
    return parser


def parse_rates(rate: str, rate_of: list[str]) -> tuple[int | None, dict[str, int | None]]:
    """``--rate`` and the ``--rate-of HOST=RATE`` values as bits per second (ValueError naming a bad one).

    >>> parse_rates("20mbit", ["host2=1mbit"])
    (20000000, {'host2': 1000000})
    """
    own: dict[str, int | None] = {}
    for item in rate_of:
        host, sep, value = item.partition("=")
        if not sep or not host:
            raise ValueError(f"--rate-of {item!r}: expected HOST=RATE, e.g. host2=5mbit")
        own[host.strip()] = parse_rate(value)
    return parse_rate(rate), own


def describe(cluster: Cluster) -> str:
    """One line: the hosts, their addresses and rates, their TCP congestion control."""
    hosts = ", ".join(f"{h} {cluster.addresses[h]} {format_rate(cluster.rates[h])}" for h in cluster.hosts)
    return (f"netsim: {len(cluster.hosts)} hosts ({hosts}) on a bridge, TCP {cluster.tcp_congestion('host1')}; "
            f"hostfile {cluster.hostfile}")


class CommandRun:
    """COMMAND on host1 in a process group of its own: a signal to netsim is forwarded to it once, a second one
    (or the end of the grace period) kills it."""

    def __init__(self, cluster: Cluster, command: list[str]):
        self.cluster = cluster
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.signum = 0
        self.deadline = float("inf")

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.proc is None:
            raise Interrupted(signum)
        if self.signum:  # a second signal: no more grace
            self._kill(signal.SIGKILL)
            return
        self.signum = signum
        self.deadline = time.monotonic() + GRACE_S
        self._kill(signum)

    def _kill(self, signum: int) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def run(self) -> int:
        env = self.cluster.mpi_env(os.environ)
        self.proc = subprocess.Popen(self.cluster.enter("host1") + self.command, env=env, process_group=0)
        while True:
            try:
                code = self.proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > self.deadline:
                    self._kill(signal.SIGKILL)
        return 128 - code if code < 0 else code


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("netsim: error: no command: netsim run --hosts N [...] -- COMMAND [ARG ...]", file=sys.stderr)
        return NETSIM_ERROR
    if args.slots < 1:
        print(f"netsim: error: --slots {args.slots}: a host has at least one slot", file=sys.stderr)
        return NETSIM_ERROR
    try:
        rate, rate_of = parse_rates(args.rate, args.rate_of)
    except ValueError as err:
        print(f"netsim: error: {err}", file=sys.stderr)
        return NETSIM_ERROR
    runner: CommandRun | None = None
    handler_of = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if runner is None:
            raise Interrupted(signum)
        runner.on_signal(signum, frame)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler_of[sig] = signal.signal(sig, on_signal)
    cluster: Cluster | None = None
    try:
        cluster = Cluster.create(args.hosts, rate=rate, rate_of=rate_of, shared=args.share, slots=args.slots,
                                 subnet=args.subnet, congestion_control=args.tcp_congestion)
        print(describe(cluster), file=sys.stderr, flush=True)
        print(f"netsim: on host1: {shlex.join(command)}", file=sys.stderr, flush=True)
        runner = CommandRun(cluster, command)
        code = runner.run()
        sent = {host: cluster.tx_bytes(host) for host in cluster.hosts}
    except NotRoot as err:
        print(f"netsim: error: {err}", file=sys.stderr)
        return NETSIM_ERROR
    except Interrupted as err:
        print(f"netsim: interrupted by {err} while making the cluster; removed what was made", file=sys.stderr)
        return 128 + err.signum
    except (OSError, ValueError) as err:
        print(f"netsim: error: {err}", file=sys.stderr)
        return NETSIM_ERROR
    finally:
        if cluster is not None:
            cluster.destroy()
        for sig, handler in handler_of.items():
            signal.signal(sig, handler)
    sys.stdout.flush()
    print("netsim: tx_bytes " + " ".join(f"{host}={n}" for host, n in sent.items()), file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if os.geteuid() != 0:
        print("netsim: error: needs root (network and mount namespaces, tc); run it as root", file=sys.stderr)
        return NETSIM_ERROR
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
