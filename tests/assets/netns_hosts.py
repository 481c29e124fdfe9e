"""Two "hosts" on one machine for tests/sessions/test_two_hosts.py: each a network + UTS namespace, joined by a veth
pair.

``host1`` (10.213.17.1) runs the launcher; ``host2`` (10.213.17.2) also has its own
mount namespace with a private ``/tmp`` (a tmpfs), so a run directory under ``/tmp``
is not shared between the two. mpiexec reaches ``host2`` through
``tests/assets/netns_agent.sh``, which stands in for ssh (``PRTE_MCA_plm_ssh_agent``).
Only addresses inside the two namespaces are used. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).

Example
-------
>>> hosts = TwoHosts.create()          # doctest: +SKIP
>>> hosts.run_in("host1", ["hostname"], capture_output=True, text=True).stdout   # doctest: +SKIP
'host1\\n'
>>> hosts.destroy()                    # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AGENT = Path(__file__).resolve().parent / "netns_agent.sh"
SUBNET = "10.213.17.0/24"
ADDRESSES = {"host1": "10.213.17.1", "host2": "10.213.17.2"}
LINK = "tm0"  # the veth end's name inside each namespace


def _sh(*argv: str) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.returncode}")


class TwoHosts:
    """The namespaces of host1 and host2 (see the module docstring); :meth:`destroy` removes everything."""

    def __init__(self, tag: str, base: Path):
        self.tag = tag
        self.base = base  # private bind mount holding the namespace files and per-host links
        self.netns = {host: f"{tag}-{host}" for host in ADDRESSES}

    # ----- setup / teardown -------------------------------------------------------------
    @classmethod
    def create(cls) -> TwoHosts:
        """Make both hosts; raises OSError (after cleaning up) when namespaces cannot be made here."""
        if os.geteuid() != 0:
            raise OSError("not root")
        for tool in ("ip", "unshare", "nsenter", "mount"):
            if shutil.which(tool) is None:
                raise OSError(f"{tool} not found")
        tag = f"tm{os.getpid()}"
        hosts = cls(tag, Path(tempfile.mkdtemp(prefix=f"theanompi-{tag}-", dir="/run")))
        try:
            hosts._build()
        except BaseException:
            hosts.destroy()
            raise
        return hosts

    def _build(self) -> None:
        # namespace files can only be bound into a mount that is not shared
        _sh("mount", "--bind", str(self.base), str(self.base))
        _sh("mount", "--make-private", str(self.base))
        for netns in self.netns.values():
            _sh("ip", "netns", "add", netns)
        _sh("ip", "link", "add", LINK, "netns", self.netns["host1"], "type", "veth",
            "peer", "name", LINK, "netns", self.netns["host2"])
        for host, netns in self.netns.items():
            _sh("ip", "-n", netns, "addr", "add", f"{ADDRESSES[host]}/24", "dev", LINK)
            _sh("ip", "-n", netns, "link", "set", "lo", "up")
            _sh("ip", "-n", netns, "link", "set", LINK, "up")
            links = self.base / "hosts" / host
            links.mkdir(parents=True)
            (links / "net").symlink_to(f"/run/netns/{netns}")
            (links / "uts").touch()
            _sh("unshare", f"--uts={links / 'uts'}", "hostname", host)
        mnt = self.base / "hosts" / "host2" / "mnt"
        mnt.touch()
        # host2's own /tmp; what a real host would share (the checkout, the venv: README's "same venv path")
        # is bound back in when it lives under /tmp (a clone in /tmp, as CI may make it)
        keep = sorted({str(Path(p).resolve()) for p in self.shared_paths()
                       if Path(p).resolve().is_relative_to("/tmp")})
        script = ('set -e; i=0; for p in "$@"; do mkdir -p "$STASH/$i"; mount --bind "$p" "$STASH/$i"; '
                  'i=$((i+1)); done; mount -t tmpfs tmpfs /tmp; i=0; for p in "$@"; do mkdir -p "$p"; '
                  'mount --bind "$STASH/$i" "$p"; i=$((i+1)); done')
        _sh("unshare", f"--mount={mnt}", "--propagation", "private", "env", f"STASH={self.base / 'stash'}",
            "sh", "-c", script, "sh", *keep)

    @staticmethod
    def shared_paths() -> list[str]:
        """Directories every host must see: this checkout and the Python environment running the tests."""
        return [str(Path(__file__).resolve().parents[2]), sys.prefix]

    def destroy(self) -> None:
        """Kill what still runs in the namespaces, then remove them (never raises)."""
        for host in self.netns:
            for pid in self.pids(host):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        hosts = self.base / "hosts"
        for path in (hosts / "host2" / "mnt", hosts / "host1" / "uts", hosts / "host2" / "uts"):
            subprocess.run(["umount", str(path)], capture_output=True)
        for netns in self.netns.values():
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)  # takes the veth pair along
        subprocess.run(["umount", str(self.base)], capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)

    # ----- use ----------------------------------------------------------------------------
    @property
    def hosts_dir(self) -> Path:
        return self.base / "hosts"

    def enter(self, host: str) -> list[str]:
        """argv prefix that runs a command inside ``host``'s namespaces."""
        links = self.hosts_dir / host
        argv = ["nsenter", f"--net={links / 'net'}", f"--uts={links / 'uts'}"]
        if (links / "mnt").exists():
            argv.append(f"--mount={links / 'mnt'}")
        return argv + ["--"]

    def run_in(self, host: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.enter(host) + list(argv), **kwargs)

    def mpi_env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` plus what makes mpiexec use the agent and the namespaces' link (TCP between hosts only)."""
        env = dict(base)
        env.update({
            "THEANOMPI_NETNS_HOSTS": str(self.hosts_dir),
            "PRTE_MCA_plm_ssh_agent": str(AGENT),
            "PRTE_MCA_plm_ssh_no_tree_spawn": "1",
            "PRTE_MCA_prte_if_include": SUBNET,  # PRRTE's out-of-band channel
            "OMPI_MCA_btl_tcp_if_include": SUBNET,  # MPI messages between hosts
            "OMPI_MCA_pml": "ob1",  # BTL transports only (no UCX shared-memory tricks)
            "OMPI_MCA_btl": "self,sm,tcp",
        })
        return env

    def pids(self, host: str) -> list[int]:
        """Processes running in ``host``'s network namespace."""
        proc = subprocess.run(["ip", "netns", "pids", self.netns[host]], capture_output=True, text=True)
        return [int(p) for p in proc.stdout.split()]

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

    def link_bytes(self, host: str) -> int:
        """Bytes received plus sent on ``host``'s end of the link between the hosts (the kernel's counters)."""
        proc = subprocess.run(["ip", "-j", "-s", "-n", self.netns[host], "link", "show", LINK],
                              capture_output=True, text=True, check=True)
        stats = json.loads(proc.stdout)[0]["stats64"]
        return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])

    def wait_idle(self, timeout: float = 15.0) -> dict[str, list[int]]:
        """Wait until nothing runs in either namespace; returns what still runs after ``timeout``."""
        deadline = time.time() + timeout
        while True:
            left = {host: self.pids(host) for host in self.netns}
            if not any(left.values()) or time.time() > deadline:
                return {host: pids for host, pids in left.items() if pids}
            time.sleep(0.2)
