"""Where an elastic session finds its workers at every restart: a host-discovery script, the allocation it started
from, or its DEVICES -- less the devices and hosts that failed within ELASTIC_COOLDOWN.

``HOST_DISCOVERY=SCRIPT`` names an executable that prints the hosts available now, one ``host:slots`` line each (as
``horovodrun --host-discovery-script`` reads it; ``#`` comments and blank lines are skipped, a host without
``:slots`` has one). It is run without a shell, in the launch directory, with a time limit
(:data:`DISCOVERY_TIMEOUT`); each slot is one worker, with the kind of device (``cpu`` or ``cuda``) the session
started with. A script that fails or prints nonsense is named in one line: at launch that ends the launch, during the
session the previous answer stands (a warning says why).

:class:`Membership` keeps what failed: a device whose worker was lost, and every device of a host that was lost, are
left out of restarts for ELASTIC_COOLDOWN seconds and come back after it (not forever, as a blacklist would) -- if
the source still offers them.

Example
-------
>>> parse_host_slots("node1:2\\n# spare\\nnode2\\n", "HOST_DISCOVERY='d.sh'")
[('node1', 2), ('node2', 1)]
>>> clock = iter([0.0, 1.0, 61.0]).__next__
>>> members = Membership(lambda: parse_devices("cpu0,cpu1,cpu2"), cooldown=60.0, clock=clock)
>>> members.fail(parse_devices("cpu1"), hosts=[])
>>> [str(d) for d in members.available()], [str(d) for d in members.available()]
(['cpu0', 'cpu2'], ['cpu0', 'cpu1', 'cpu2'])
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from theanompi.core.devices import HOST_RE, Device, parse_devices
from theanompi.core.errors import ConfigError
from theanompi.launch.allocation import allocation_of_hosts, read_allocation

log = logging.getLogger(__name__)

#: seconds a discovery script may run
DISCOVERY_TIMEOUT = 30.0
#: the most slots one host may offer (more is a typo)
MAX_SLOTS = 4096
#: the most a discovery script may print (tens of thousands of ``host:slots`` lines; more is a runaway script)
MAX_OUTPUT = 1 << 20


class _TooMuchOutput(Exception):
    """A discovery script printed more than :data:`MAX_OUTPUT` bytes."""


def parse_host_slots(text: str, what: str) -> list[tuple[str, int]]:
    """``host:slots`` lines -> [(host, slots)] in order (a host listed twice: its slots summed)."""
    slots: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        host, colon, count = line.partition(":")
        host = host.strip()
        if not HOST_RE.match(host):
            raise ConfigError(f"{what}: line {lineno}: {host!r} is not a host name")
        n = count.strip() if colon else "1"
        if not n.isdigit() or not 1 <= int(n) <= MAX_SLOTS:
            raise ConfigError(f"{what}: line {lineno}: {line!r} is not host:slots (slots 1..{MAX_SLOTS})")
        slots[host] = slots.get(host, 0) + int(n)
    return list(slots.items())


def run_discovery(script: str, cwd: str, timeout: float = DISCOVERY_TIMEOUT) -> list[tuple[str, int]]:
    """The hosts HOST_DISCOVERY offers now (ConfigError naming the script and what went wrong)."""
    what = f"HOST_DISCOVERY={script!r}"
    try:
        returncode, stdout, stderr = _script_output([os.path.join(cwd, script)], cwd, timeout)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{what}: still running after {timeout:.0f} s") from None
    except _TooMuchOutput:
        raise ConfigError(f"{what}: printed more than {MAX_OUTPUT >> 20} MiB (stopped)") from None
    except OSError as err:
        raise ConfigError(f"{what}: cannot be run: {err.strerror or err}") from None
    if returncode != 0:
        said = (stderr.strip().splitlines() or [""])[-1][:200]
        raise ConfigError(f"{what}: exit code {returncode}{': ' + said if said else ''}")
    return parse_host_slots(stdout, what)


def _script_output(argv: list[str], cwd: str, timeout: float) -> tuple[int, str, str]:
    """(exit code, output, the end of its error output) of ``argv`` run without input; killed after ``timeout``
    seconds (:class:`subprocess.TimeoutExpired`) or once its output passes :data:`MAX_OUTPUT` bytes
    (:class:`_TooMuchOutput`), so that no script can hang the launcher or fill its memory."""
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    with subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc, selectors.DefaultSelector() as pipes:
        try:
            for pipe, buffer in ((proc.stdout, out), (proc.stderr, err)):
                if pipe is not None:  # both are: PIPE
                    pipes.register(pipe, selectors.EVENT_READ, buffer)
            while pipes.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout)
                for key, _ in pipes.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        pipes.unregister(key.fileobj)
                    key.data.extend(chunk)
                if len(out) > MAX_OUTPUT:
                    raise _TooMuchOutput
                del err[:-4096]  # only its last line is shown
            proc.wait(max(deadline - time.monotonic(), 0.0))
        except BaseException:
            proc.kill()
            raise
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def discovered_devices(script: str, cwd: str, kind: str, environ: Mapping[str, str] = os.environ) -> str:
    """A DEVICES value of what HOST_DISCOVERY offers now (``kind`` devices; this machine first)."""
    return allocation_of_hosts(f"HOST_DISCOVERY={script!r}", run_discovery(script, cwd), kind, environ).devices


@dataclass(frozen=True)
class DeviceSource:
    """Where restarts find the devices: ``read()`` gives what is available now, ``describe`` says where from."""

    describe: str
    read: Callable[[], list[Device]]

    @classmethod
    def discovery(cls, script: str, cwd: str, kind: str) -> DeviceSource:
        return cls(f"HOST_DISCOVERY={script}", lambda: parse_devices(discovered_devices(script, cwd, kind)))

    @classmethod
    def allocation(cls, environ: Mapping[str, str], hostfile: str | None) -> DeviceSource:
        def read() -> list[Device]:
            allocation = read_allocation(environ, hostfile)
            return parse_devices(allocation.devices) if allocation is not None else []

        return cls("the allocation", read)

    @classmethod
    def fixed(cls, devices: list[Device]) -> DeviceSource:
        return cls("DEVICES", lambda: list(devices))


def device_key(device: Device) -> tuple[str, str, int]:
    """What identifies a device across DEVICES values: its host ('' for this one), kind and index."""
    return ("" if device.is_local else device.host, device.kind, device.index)


class Membership:
    """The devices a restart may use: ``read()``'s, less those that failed (or whose host failed) within
    ``cooldown`` seconds. A source that fails (a discovery script's error) gives its previous answer."""

    def __init__(self, read: Callable[[], list[Device]], cooldown: float, clock: Callable[[], float] = time.monotonic):
        self.read = read
        self.cooldown = cooldown
        self.clock = clock
        self.failed: dict[tuple[str, str, int], float] = {}  # device -> when it failed
        self.failed_hosts: dict[str, float] = {}  # host -> when it failed
        self.last: list[Device] = []

    def fail(self, devices: Iterable[Device], hosts: Iterable[str]) -> None:
        """These devices and every device of these hosts failed now."""
        now = self.clock()
        for device in devices:
            self.failed[device_key(device)] = now
        for host in hosts:
            self.failed_hosts[host] = now

    def available(self) -> list[Device]:
        """The source's devices now, less those still cooling down."""
        now = self.clock()
        try:
            self.last = self.read()
        except ConfigError as err:
            log.warning("%s; using its previous answer", err)
        cooling = {key for key, when in self.failed.items() if now - when < self.cooldown}
        hosts = {host for host, when in self.failed_hosts.items() if now - when < self.cooldown}
        return [d for d in self.last if device_key(d) not in cooling and device_key(d)[0] not in hosts]

    def left_out(self) -> list[str]:
        """What is cooling down now, in words (for the line that says why a restart has too few workers)."""
        now = self.clock()
        out = [f"{host + ':' if host else ''}{kind}{index} ({self.cooldown - (now - when):.0f} s more)"
               for (host, kind, index), when in self.failed.items() if now - when < self.cooldown]
        return out + [f"host {host} ({self.cooldown - (now - when):.0f} s more)"
                      for host, when in self.failed_hosts.items() if now - when < self.cooldown]
