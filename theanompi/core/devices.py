"""Device strings: ``cpu0``, ``cuda1`` and host lists ``host1:cuda0,cuda1;host2:cuda0``.

Each worker rank is pinned to one :class:`Device`. Parsing is pure (no GPU
libraries are touched); :func:`check_local_devices` checks availability on
this machine.

Example
-------
>>> [str(d) for d in parse_devices("cpu0,cpu1")]
['cpu0', 'cpu1']
>>> [str(d) for d in parse_devices("node1:cuda0,cuda1;node2:cuda0")]
['node1:cuda0', 'node1:cuda1', 'node2:cuda0']
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from theanompi.core.errors import ConfigError

_DEVICE_RE = re.compile(r"^(cpu|cuda)(\d+)$")
#: what a host name may be (letters, digits, ".", "-", "_")
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-_]*$")
LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1"})
ALLOWED = "cpuN or cudaN (N = 0, 1, ...), optionally prefixed by 'host:'"


@dataclass(frozen=True)
class Device:
    """One worker's device: ``kind`` is 'cpu' or 'cuda'; ``host`` '' means this machine."""

    kind: str
    index: int
    host: str = ""

    @property
    def is_local(self) -> bool:
        return self.host in LOCAL_HOSTS or self.host == socket.gethostname()

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:
        name = f"{self.kind}{self.index}"
        return f"{self.host}:{name}" if self.host else name


def _parse_one(token: str, host: str) -> Device:
    match = _DEVICE_RE.match(token)
    if not match:
        raise ConfigError(f"DEVICES: {token!r} is not a device; use {ALLOWED}")
    return Device(kind=match.group(1), index=int(match.group(2)), host=host)


def _parse_group(group: str) -> list[Device]:
    """``host:dev,dev`` or ``dev,dev`` -> devices."""
    host = ""
    if ":" in group:
        host, group = group.split(":", 1)
        host = host.strip()
        if not HOST_RE.match(host):
            raise ConfigError(f"DEVICES: host name {host!r} is malformed")
    tokens = [t.strip() for t in group.split(",")]
    if any(not t for t in tokens):
        raise ConfigError(f"DEVICES: empty device in {group!r}; use {ALLOWED}")
    return [_parse_one(t, host) for t in tokens]


def parse_devices(spec: str | list[str] | tuple[str, ...]) -> list[Device]:
    """Parse a DEVICES value (cfg string or Python list) into devices, in rank order.

    Raises ConfigError naming the offending entry for malformed, empty or
    duplicate devices.
    """
    if isinstance(spec, str):
        groups = [g.strip() for g in spec.split(";")]
    elif isinstance(spec, (list, tuple)) and all(isinstance(s, str) for s in spec):
        groups = [s.strip() for s in spec]
    else:
        raise ConfigError(f"DEVICES: {spec!r} must be a string or a list of strings")
    if not groups or any(not g for g in groups):
        raise ConfigError(f"DEVICES: {spec!r} has an empty entry; use {ALLOWED}")
    devices = [d for g in groups for d in _parse_group(g)]
    seen: set[tuple[bool, str, str, int]] = set()
    for dev in devices:
        key = (dev.is_local, "" if dev.is_local else dev.host, dev.kind, dev.index)
        if key in seen:
            raise ConfigError(f"DEVICES: {str(dev)!r} is listed twice; each device takes one worker")
        seen.add(key)
    return devices


def count_local_gpus() -> int:
    """Number of CUDA GPUs visible here (0 without CuPy or without a GPU); never raises."""
    try:
        import cupy  # noqa: PLC0415 - cupy is optional (CUDA only)
    except ImportError:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # CUDARuntimeError without a driver/GPU
        return 0


def check_local_devices(devices: list[Device]) -> None:
    """Fail fast (ConfigError) if a local cuda device is not present on this machine."""
    local_cuda = [d for d in devices if d.is_cuda and d.is_local]
    if not local_cuda:
        return
    n_gpus = count_local_gpus()
    for dev in local_cuda:
        if dev.index >= n_gpus:
            seen = "no CUDA GPU is visible" if n_gpus == 0 else f"only {n_gpus} GPU(s) are visible"
            raise ConfigError(
                f"DEVICES: {str(dev)!r} needs a CUDA GPU but {seen} on this machine "
                "(install the [cuda] extra on a GPU machine, or use cpuN devices)"
            )
