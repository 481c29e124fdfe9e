"""A cluster on one machine: hosts that are Linux namespaces, joined through a bridge, each link limited with tc.

The library under ``tools/netsim.py`` (its command line) and the tests and benchmarks that need several hosts.

Host ``hostK`` (K = 1..N) is a *holder* process, ``unshare --net --uts --mount ... sleep infinity``, whose
namespaces the host's processes enter (``nsenter``, :meth:`Cluster.enter`): its own network stack with one
interface, ``eth0`` at ``PREFIX.K`` of the cluster's /24 subnet, its own host name, and its own mounts -- a fresh
tmpfs on ``/tmp`` (the paths a session needs that lie under /tmp are bound back in: the working directory, the
Python environment, ``THEANOMPI_CACHE_DIR``, ``PYTHONPATH``, ``shared``; ``$TMPDIR``, if under /tmp, is made
empty) and a sysfs of its own network namespace on ``/sys``. A *switch* namespace holds the bridge ``br0``; each
host's ``eth0`` is one end of a veth pair whose other end, the port ``hostK``, is enslaved to the bridge.

A link's rate is a token bucket (``tc qdisc ... tbf``) on both ends of the host's veth pair: on ``eth0`` it limits
what the host sends, on the switch's port what it receives, so a host limited to 20 Mbit/s sends and receives at
most 20 Mbit/s (counted in Ethernet frames: TCP payload gets ~4 % less). netem (delay, loss) is not in every kernel
-- this machine's refuses ``tc qdisc add ... netem`` with "Specified qdisc kind is unknown" -- so links have a
rate, not a latency.

A host's TCP congestion control is the kernel's default (a new network namespace inherits this machine's: ``bbr``
on the VMs this project is measured on) unless ``congestion_control`` names another. It matters on a link that
carries data both ways at once, as an allreduce's does: the ACKs of one direction's flow wait in the same tbf queue
as the other direction's data, so the round trip grows far beyond its minimum, and bbr, whose window is twice the
rate times the *minimum* round trip, runs out of window: a 16 MB allreduce on 2 hosts at 20 Mbit/s moved 75-92 % of
the link under bbr and 94 % under ``reno`` (loss-based, as Linux's usual default ``cubic`` is), measured with
benchmarks/slow_links.py's allreduce part. A namespace may only choose from
``net.ipv4.tcp_allowed_congestion_control`` (``reno`` always).

Nothing is registered with ``ip netns`` and nothing is made in this machine's own network namespace: the holders
die with the process that made them (``PR_SET_PDEATHSIG``), and the namespaces, veth pairs, bridge and qdiscs die
with the last process inside them. :meth:`Cluster.destroy` kills every process in the namespaces, then the holders.
Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).

Example
-------
>>> cluster = Cluster.create(3, rate=parse_rate("20mbit"), rate_of={"host3": parse_rate("1mbit")})  # doctest: +SKIP
>>> cluster.run_in("host2", ["hostname"], capture_output=True, text=True).stdout              # doctest: +SKIP
'host2\\n'
>>> cluster.tx_bytes("host1") >= 0                                                             # doctest: +SKIP
True
>>> cluster.destroy()                                                                          # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

AGENT = Path(__file__).resolve().parent / "netsim_agent.sh"
DEFAULT_SUBNET = "10.213.40.0/24"
MAX_HOSTS = 8
LINK = "eth0"  # each host's interface
BRIDGE = "br0"  # in the switch namespace
#: tbf's queue, in time at the link's rate: what a sender may have waiting before the qdisc drops
QUEUE_LATENCY = "100ms"
#: tbf's bucket: at least this many bytes, or 2 ms at the rate (a 1 Gbit/s link needs ~250 KB to keep up)
MIN_BURST_BYTES = 16 * 1024
BURST_SECONDS = 0.002
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
UNLIMITED = ("unlimited", "none")
CONGESTION_SYSCTL = "net.ipv4.tcp_congestion_control"
TOOLS = ("ip", "tc", "unshare", "nsenter", "mount")
PR_SET_PDEATHSIG = 1


class NotRoot(OSError):
    """The cluster needs root (network and mount namespaces, tc)."""


def parse_rate(text: str) -> int | None:
    """Bits per second of a rate such as ``20mbit``, ``1gbit``, ``500kbit`` or ``1.5mbit``; None for ``unlimited``.

    >>> parse_rate("20mbit"), parse_rate("1Gbit"), parse_rate("unlimited")
    (20000000, 1000000000, None)
    >>> parse_rate("20mbps")
    Traceback (most recent call last):
    ...
    ValueError: rate '20mbps' is not NUMBER followed by bit, kbit, mbit, gbit or tbit (e.g. 20mbit), or unlimited
    """
    word = text.strip().lower()
    if word in UNLIMITED:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?bit)", word)
    if match is None:
        raise ValueError(f"rate {text!r} is not NUMBER followed by bit, kbit, mbit, gbit or tbit (e.g. 20mbit), "
                         "or unlimited")
    bits = round(float(match.group(1)) * RATE_UNITS[match.group(2)])
    if bits < 8000:
        raise ValueError(f"rate {text!r} is below 8kbit, the least a link here can be limited to")
    return bits


def format_rate(bits: int | None) -> str:
    """A rate as people write it.

    >>> format_rate(20_000_000), format_rate(1_500_000), format_rate(None)
    ('20mbit', '1.5mbit', 'unlimited')
    """
    if bits is None:
        return "unlimited"
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bits >= RATE_UNITS[unit]:
            return f"{bits / RATE_UNITS[unit]:g}{unit}"
    return f"{bits}bit"


def tbf_args(bits: int) -> list[str]:
    """``tc qdisc`` arguments of a token bucket that limits a link to ``bits`` per second.

    >>> tbf_args(20_000_000)
    ['tbf', 'rate', '20000000bit', 'burst', '16384', 'latency', '100ms']
    """
    burst = max(MIN_BURST_BYTES, int(bits / 8 * BURST_SECONDS))
    return ["tbf", "rate", f"{bits}bit", "burst", str(burst), "latency", QUEUE_LATENCY]


def check_congestion_control(name: str, available: str | None = None, allowed: str | None = None) -> str:
    """``name`` if a network namespace of this kernel may use it as its TCP congestion control, else ValueError
    naming the choices (the kernel's available and allowed lists: ``/proc/sys/net/ipv4/...``; ``reno`` is always
    allowed).

    >>> check_congestion_control("reno", "reno bbr cubic", "reno bbr")
    'reno'
    >>> check_congestion_control("cubic", "reno bbr cubic", "reno bbr")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --tcp-congestion cubic: a network namespace here may use only reno, bbr (net.ipv4.tcp_allowed_...)
    >>> check_congestion_control("vegas", "reno bbr cubic", "reno bbr")
    Traceback (most recent call last):
    ...
    ValueError: --tcp-congestion vegas: this kernel has no such congestion control (it has reno, bbr, cubic)
    """
    proc = Path("/proc/sys/net/ipv4")
    have = (available if available is not None else
            (proc / "tcp_available_congestion_control").read_text()).split()
    may = {"reno", *(allowed if allowed is not None else (proc / "tcp_allowed_congestion_control").read_text()).split()}
    if name not in have:
        raise ValueError(f"--tcp-congestion {name}: this kernel has no such congestion control "
                         f"(it has {', '.join(have)})")
    if name not in may:
        choices = [c for c in have if c in may]
        raise ValueError(f"--tcp-congestion {name}: a network namespace here may use only {', '.join(choices)} "
                         "(net.ipv4.tcp_allowed_congestion_control)")
    return name


def host_names(n_hosts: int) -> list[str]:
    """``host1`` .. ``hostN``.

    >>> host_names(3)
    ['host1', 'host2', 'host3']
    """
    return [f"host{k}" for k in range(1, n_hosts + 1)]


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the process that started it dies (the holders must not outlive it)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _sh(argv: list[str], stdin: str | None = None) -> None:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit status {proc.returncode}'}")


def _net_ns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _top_level(paths: Iterable[str]) -> list[str]:
    """The distinct ``paths``, resolved, without those inside another of them.

    >>> _top_level(["/tmp/a/b", "/tmp/a", "/tmp/c"])
    ['/tmp/a', '/tmp/c']
    """
    kept: list[Path] = []
    for path in sorted({Path(os.path.realpath(p)) for p in paths}):
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return [str(p) for p in kept]


#: the host's mounts, run inside its namespaces: stash the paths to keep, a fresh tmpfs on /tmp, the paths bound
#: back, a sysfs of the host's network namespace, then the empty directories asked for ($1: "keep" count)
MOUNT_SCRIPT = """set -e
n=$1; shift
if [ "$PRIVATE_TMP" = 1 ]; then
    i=0; for p in "$@"; do [ $i -lt $n ] || break; mkdir -p "$STASH/$i"; mount --bind "$p" "$STASH/$i"; i=$((i+1)); done
    mount -t tmpfs -o mode=1777 tmpfs /tmp
    i=0; for p in "$@"; do [ $i -lt $n ] || break; mkdir -p "$p"; mount --bind "$STASH/$i" "$p"; umount "$STASH/$i"; \
i=$((i+1)); done
fi
mount -t sysfs sysfs /sys
i=0; for p in "$@"; do [ $i -lt $n ] || mkdir -p "$p"; i=$((i+1)); done
"""


class Cluster:
    """N hosts on this machine (see the module docstring). :meth:`create` makes them, :meth:`destroy` removes
    everything; the constructor only stores what :meth:`create` made."""

    def __init__(self, base: Path, hosts: list[str], addresses: dict[str, str], subnet: str,
                 rates: dict[str, int | None], slots: int, congestion_control: str | None = None):
        self.base = base  # /run/netsim-PID-XXXX: the agent's per-host files, the hostfile
        self.hosts = hosts
        self.addresses = addresses
        self.subnet = subnet
        self.rates = rates
        self.slots = slots
        self.congestion_control = congestion_control  # None: the kernel's default
        self.holders: dict[str, subprocess.Popen[bytes]] = {}  # host (and "switch") -> its holder process
        self.net_ns: dict[str, int] = {}  # host (and "switch") -> inode of its network namespace

    # ----- setup ----------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, n_hosts: int, rate: int | None = None, rate_of: Mapping[str, int | None] | None = None,
               shared: Iterable[str] = (), private_tmp: Iterable[str] | None = None, slots: int = 1,
               subnet: str = DEFAULT_SUBNET, tmpdirs: Iterable[str] | None = None,
               congestion_control: str | None = None) -> Cluster:
        """Make ``n_hosts`` hosts (2..8) whose links run at ``rate`` bits/s (None: unlimited), ``rate_of`` a host's
        own; ``congestion_control``: the hosts' TCP congestion control (None: the kernel's default);
        ``private_tmp``: the hosts with their own /tmp (None: every host); ``shared``: more paths every host sees
        although they lie under /tmp; ``tmpdirs``: directories made empty in each private /tmp (default
        ``$TMPDIR``). Raises :class:`NotRoot`, ValueError for a bad argument, OSError (after removing what it had
        made) when the cluster cannot be made here."""
        if os.geteuid() != 0:
            raise NotRoot("netsim needs root (network and mount namespaces, tc); run it as root")
        if not 2 <= n_hosts <= MAX_HOSTS:
            raise ValueError(f"--hosts {n_hosts}: a cluster has 2 to {MAX_HOSTS} hosts")
        hosts = host_names(n_hosts)
        rates: dict[str, int | None] = {host: rate for host in hosts}
        for host, own in (rate_of or {}).items():
            if host not in rates:
                raise ValueError(f"--rate-of {host}: no such host (the hosts are {', '.join(hosts)})")
            rates[host] = own
        net = ipaddress.ip_network(subnet)
        if net.prefixlen > 28 or net.version != 4:
            raise ValueError(f"subnet {subnet}: an IPv4 subnet of at least 16 addresses is needed")
        if congestion_control is not None:
            check_congestion_control(congestion_control)
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        if missing:
            raise OSError(f"netsim needs {', '.join(missing)} (iproute2, util-linux)")
        addresses = {host: str(net.network_address + k) for k, host in enumerate(hosts, start=1)}
        base = Path(tempfile.mkdtemp(prefix=f"netsim-{os.getpid()}-", dir="/run"))
        cluster = cls(base, hosts, addresses, str(net), rates, slots, congestion_control)
        try:
            private = set(hosts if private_tmp is None else private_tmp)
            tmp = [os.environ["TMPDIR"]] if tmpdirs is None and os.environ.get("TMPDIR") else list(tmpdirs or ())
            cluster._build(private, cluster.paths_to_keep(shared), tmp)
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    @staticmethod
    def paths_to_keep(shared: Iterable[str] = ()) -> list[str]:
        """What every host sees although it lies under /tmp: the working directory, this Python's environment and
        the one ``VIRTUAL_ENV`` names, ``THEANOMPI_CACHE_DIR``, the ``PYTHONPATH`` entries, ``shared``."""
        env = os.environ
        candidates = [os.getcwd(), sys.prefix, env.get("VIRTUAL_ENV", ""), env.get("THEANOMPI_CACHE_DIR", ""),
                      *env.get("PYTHONPATH", "").split(os.pathsep), *shared]
        return _top_level(p for p in candidates if p and os.path.isdir(p)
                          and Path(os.path.realpath(p)).is_relative_to("/tmp"))

    def _holder(self, name: str, flags: list[str]) -> None:
        """Start the process that holds ``name``'s namespaces; wait until it is inside them."""
        ours = _net_ns(os.getpid())
        proc = subprocess.Popen(["unshare", *flags, "sleep", "infinity"], preexec_fn=_die_with_parent,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        self.holders[name] = proc
        deadline = time.monotonic() + 10
        while True:
            inode = _net_ns(proc.pid)
            try:
                running = Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep"
            except OSError:
                running = False
            if running and inode is not None and inode != ours:
                self.net_ns[name] = inode
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode().strip() if proc.stderr else ""
                raise OSError(f"unshare {' '.join(flags)}: {err or 'the namespaces were not made'}")
            time.sleep(0.01)

    def _nsenter(self, name: str, *flags: str) -> list[str]:
        return ["nsenter", f"--target={self.holders[name].pid}", *flags, "--"]

    def _build(self, private: set[str], keep: list[str], tmpdirs: list[str]) -> None:
        self._holder("switch", ["--net", "--uts"])
        for host in self.hosts:
            self._holder(host, ["--net", "--uts", "--mount", "--propagation", "private"])
        sysctl = "-w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1".split()
        for name in ["switch", *self.hosts]:  # no IPv6 chatter in the link counters
            subprocess.run(self._nsenter(name, "--net") + ["sysctl", "-q", *sysctl], capture_output=True)
        if self.congestion_control is not None:
            for host in self.hosts:
                _sh(self._nsenter(host, "--net") + ["sysctl", "-q", "-w",
                                                   f"{CONGESTION_SYSCTL}={self.congestion_control}"])
        switch_pid = self.holders["switch"].pid
        switch = [f"link add {BRIDGE} type bridge", f"link set {BRIDGE} up"]
        prefix = ipaddress.ip_network(self.subnet).prefixlen
        for host in self.hosts:
            _sh(["ip", "link", "add", LINK, "netns", str(self.holders[host].pid), "type", "veth",
                 "peer", "name", host, "netns", str(switch_pid)])
            switch.append(f"link set {host} master {BRIDGE} up")
            _sh(self._nsenter(host, "--net") + ["ip", "-batch", "-"],
                stdin=f"addr add {self.addresses[host]}/{prefix} dev {LINK}\nlink set lo up\nlink set {LINK} up\n")
            _sh(self._nsenter(host, "--uts") + ["hostname", host])
        _sh(self._nsenter("switch", "--net") + ["ip", "-batch", "-"], stdin="\n".join(switch) + "\n")
        for host in self.hosts:
            bits = self.rates[host]
            if bits is not None:  # the host's upload on eth0, its download on the switch's port
                _sh(self._nsenter(host, "--net") + ["tc", "qdisc", "replace", "dev", LINK, "root", *tbf_args(bits)])
                _sh(self._nsenter("switch", "--net") + ["tc", "qdisc", "replace", "dev", host, "root",
                                                       *tbf_args(bits)])
            stash = self.base / "stash" / host
            stash.mkdir(parents=True)
            env = {**os.environ, "STASH": str(stash), "PRIVATE_TMP": "1" if host in private else "0"}
            proc = subprocess.run(self._nsenter(host, "--net", "--mount") + ["sh", "-c", MOUNT_SCRIPT, "sh",
                                  str(len(keep)), *keep, *(tmpdirs if host in private else [])],
                                  env=env, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                raise OSError(f"the mounts of {host}: {proc.stderr.strip()}")
            agent_dir = self.hosts_dir / host
            agent_dir.mkdir(parents=True)
            (agent_dir / "pid").write_text(f"{self.holders[host].pid}\n")
        (self.hosts_dir / "switch.pid").write_text(f"{self.holders['switch'].pid}\n")
        self.hostfile.write_text("".join(f"{host} slots={self.slots}\n" for host in self.hosts))

    # ----- teardown -------------------------------------------------------------------------------------------
    def destroy(self) -> None:
        """Kill every process in the cluster's namespaces (SIGTERM, then SIGKILL after 5 s), then the holders;
        remove the cluster's files. Never raises; safe to call twice."""
        names = [name for name in self.net_ns if name != "switch"] + (["switch"] if "switch" in self.net_ns else [])
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            deadline = time.monotonic() + grace
            while True:
                left = [pid for name in names for pid in self.pids(name)]
                if not left:
                    break
                if time.monotonic() > deadline:
                    break
                for pid in left:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                time.sleep(0.05)
            if not left:
                break
        for proc in self.holders.values():
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if proc.stderr:
                proc.stderr.close()
        self.holders.clear()
        shutil.rmtree(self.base, ignore_errors=True)

    # ----- use ------------------------------------------------------------------------------------------------
    @property
    def hosts_dir(self) -> Path:
        """``HOST/pid`` files, the holders' process ids: how :data:`AGENT` finds a host (``NETSIM_HOSTS_DIR``);
        ``switch.pid``, the switch's."""
        return self.base / "hosts"

    @property
    def hostfile(self) -> Path:
        """An Open MPI hostfile of the cluster: ``hostK slots=S`` per host."""
        return self.base / "hostfile"

    def enter(self, host: str, cwd: str | os.PathLike[str] | None = None) -> list[str]:
        """argv prefix that runs a command inside ``host``'s namespaces, in ``cwd`` (default: this process's)."""
        return self._nsenter(host, "--net", "--uts", "--mount", f"--wd={cwd or os.getcwd()}")

    def run_in(self, host: str, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(argv, **kwargs)`` on ``host`` (``cwd`` is the directory there)."""
        cwd = kwargs.pop("cwd", None)
        return subprocess.run(self.enter(host, cwd) + list(argv), **kwargs)  # type: ignore[call-overload,no-any-return]

    def mpi_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus what makes mpiexec reach the hosts through :data:`AGENT` and send MPI's messages over the
        cluster's links (TCP between hosts, shared memory within one), and ``NETSIM_HOSTFILE``."""
        env = dict(base)
        env.update({
            "NETSIM_HOSTS_DIR": str(self.hosts_dir),
            "NETSIM_HOSTFILE": str(self.hostfile),
            "NETSIM_HOSTS": ",".join(self.hosts),
            "PRTE_MCA_plm_ssh_agent": str(AGENT),
            "PRTE_MCA_plm_ssh_no_tree_spawn": "1",
            "PRTE_MCA_prte_if_include": self.subnet,  # PRRTE's out-of-band channel
            "OMPI_MCA_btl_tcp_if_include": self.subnet,  # MPI messages between hosts
            "OMPI_MCA_pml": "ob1",  # BTL transports only
            "OMPI_MCA_btl": "self,sm,tcp",
        })
        return env

    def _counter(self, host: str, name: str) -> int:
        path = f"/proc/{self.holders[host].pid}/root/sys/class/net/{LINK}/statistics/{name}"
        return int(Path(path).read_text())

    def tx_bytes(self, host: str) -> int:
        """Bytes ``host`` sent on its link so far (its ``eth0``'s kernel counter, Ethernet frames)."""
        return self._counter(host, "tx_bytes")

    def tcp_congestion(self, host: str) -> str:
        """The TCP congestion control new connections of ``host`` use (its network namespace's default)."""
        proc = subprocess.run(self._nsenter(host, "--net") + ["sysctl", "-n", CONGESTION_SYSCTL],
                              capture_output=True, text=True, timeout=30)
        return proc.stdout.strip() or "unknown"

    def rx_bytes(self, host: str) -> int:
        """Bytes ``host`` received on its link so far."""
        return self._counter(host, "rx_bytes")

    def link_bytes(self, host: str) -> int:
        """Bytes received plus sent on ``host``'s link."""
        return self.tx_bytes(host) + self.rx_bytes(host)

    def pids(self, name: str) -> list[int]:
        """Processes inside ``name``'s network namespace (a host, or ``switch``), its holder left out."""
        inode, holder = self.net_ns.get(name), self.holders.get(name)
        if inode is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != (holder.pid if holder else -1) and _net_ns(int(entry)) == inode:
                found.append(int(entry))
        return found

    def worker_pids(self, host: str) -> list[int]:
        """The theanompi ranks (``python -m theanompi.rules.rank_main``) running on ``host``."""
        found = []
        for pid in self.pids(host):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"theanompi.rules.rank_main" in cmdline:
                found.append(pid)
        return found

    def wait_idle(self, timeout: float = 15.0) -> dict[str, list[int]]:
        """Wait until nothing runs on any host; returns what still runs after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = {host: self.pids(host) for host in self.hosts}
            if not any(left.values()) or time.monotonic() > deadline:
                return {host: pids for host, pids in left.items() if pids}
            time.sleep(0.2)
