"""The devices of a batch job's allocation (Slurm, PBS/Torque) or of an Open MPI hostfile, as a DEVICES value.

``tmlauncher`` without ``DEVICES`` asks :func:`read_allocation`: ``--hostfile FILE`` first, then a Slurm
allocation (``SLURM_JOB_NODELIST``), then a PBS one (``PBS_NODEFILE``). Each gives one worker per allocated task
(``cpuN`` devices) or, where the allocation lists GPUs, one per GPU (``cudaN``), on the allocated hosts; this
machine's workers come first (rank 0 writes the records on the launching host). A malformed list or file is a
ConfigError naming the variable (or the file and line) and what is wrong.

Each machine is named once: every name of this machine (its name, short or long, ``localhost``, a loopback address,
Slurm's ``SLURMD_NODENAME``) is this machine, its workers summed; another machine under a short and a long name
(``node1``, ``node1.cluster``) is refused naming both places. The files are read only if they are regular files
(:mod:`theanompi.core.no_follow`: a FIFO or ``/dev/zero`` is refused at once) of at most :data:`FILE_LIMIT` bytes,
and no allocation may ask for more ranks on a host than MAX_RANKS_PER_HOST (:data:`RANKS_PER_CORE` x this host's
cores unless set) nor more than a session's :data:`~theanompi.core.session_options.MAX_SESSION_RANKS`: a typo
(``SLURM_TASKS_PER_NODE=99999``) is one line naming where the count came from, before anything is written.

Example
-------
>>> expand_hostlist("node[01-03,07],login-a")
['node01', 'node02', 'node03', 'node07', 'login-a']
>>> expand_tasks_per_node("2(x3),1", 4)
[2, 2, 2, 1]
>>> env = {"SLURM_JOB_NODELIST": "gpu[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_GPUS_ON_NODE": "2"}
>>> read_allocation(env, scontrol=None).devices
'gpu1:cuda0,cuda1;gpu2:cuda0,cuda1'
>>> expand_hostlist("node[3-1]")
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: host list 'node[3-1]': range '3-1' runs backwards
>>> read_allocation({"SLURM_JOB_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "999"}, scontrol=None,
...                 max_per_host=16)
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: SLURM_TASKS_PER_NODE='999': 999 ranks on this host (localhost), more than \
MAX_RANKS_PER_HOST=16: a typo? To start them, set MAX_RANKS_PER_HOST=999
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from theanompi.core.devices import HOST_RE, LOCAL_HOSTS
from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import read_bounded
from theanompi.core.option_checks import ranks_per_host_limit
from theanompi.core.session_options import MAX_SESSION_RANKS

#: more hosts than this in one list is a typo (``node[1-99999999]``), not an allocation
MAX_HOSTS = 100_000
_TASKS_RE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_GPU_LINE_RE = re.compile(r"^(.+)-gpu(\d+)$")  # Torque's PBS_GPUFILE: one 'HOST-gpuN' line per allocated GPU
#: the Open MPI hostfile keys theanompi reads (slots) or accepts and ignores (the others)
HOSTFILE_KEYS = ("slots", "max_slots", "max-slots")
#: the most a hostfile, node file or GPU file holds (a host a line, MAX_HOSTS of them, with room to spare)
FILE_LIMIT = 16 << 20
#: names every machine gives itself
LOOPBACK_NAMES = frozenset(LOCAL_HOSTS - {""}) | {"localhost.localdomain", "::1", "ip6-localhost"}


@dataclass(frozen=True)
class Allocation:
    """Where the workers go: ``devices`` is a DEVICES value, ``source`` says in words where it came from."""

    source: str
    devices: str


@dataclass
class Group:
    """The devices an allocation gives one host name, and where it said so (``file:line``, ``VARIABLE='value'``)."""

    host: str
    devices: list[str]
    origins: list[str] = field(default_factory=list)


# ----- Slurm's host lists ---------------------------------------------------------------------------------------------
def _split_top_level(text: str, what: str) -> list[str]:
    """``text`` split at the commas outside brackets; ConfigError for unbalanced or nested brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ConfigError(f"{what}: nested '[' at character {i + 1}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"{what}: ']' without '[' at character {i + 1}")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ConfigError(f"{what}: '[' is not closed")
    return items + [text[start:]]


def _expand_ranges(ranges: str, what: str) -> list[str]:
    """``01-03,7`` -> ['01', '02', '03', '7']: numbers keep the width of a zero-padded lower bound."""
    values: list[str] = []
    for part in ranges.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ConfigError(f"{what}: {part.strip()!r} in [{ranges}] is not N or N-M")
        if not dash:
            values.append(low)
            continue
        if int(high) < int(low):
            raise ConfigError(f"{what}: range '{low}-{high}' runs backwards")
        if int(high) - int(low) >= MAX_HOSTS:
            raise ConfigError(f"{what}: range '{low}-{high}' has more than {MAX_HOSTS} hosts")
        width = len(low) if low.startswith("0") else 0
        values += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return values


def expand_hostlist(text: str, what: str | None = None) -> list[str]:
    """Slurm's compressed host list (``node[01-04,07],gpu[1-2]-ib``) as host names, in order.

    ``what`` names the list in errors (default: the list itself). Several bracket groups in one name multiply
    (``r[1-2]n[1-2]`` -> r1n1, r1n2, r2n1, r2n2).
    """
    what = what or f"host list {text!r}"
    text = text.strip()
    if not text:
        raise ConfigError(f"{what}: the list is empty")
    hosts: list[str] = []
    for item in _split_top_level(text, what):
        item = item.strip()
        if not item:
            raise ConfigError(f"{what}: empty entry between commas")
        names = [""]
        for piece in re.split(r"(\[[^\[\]]*\])", item):
            if piece.startswith("["):
                values = _expand_ranges(piece[1:-1], what)
                names = [name + value for name in names for value in values]
                if len(names) > MAX_HOSTS:
                    raise ConfigError(f"{what}: more than {MAX_HOSTS} hosts")
            else:
                names = [name + piece for name in names]
        bad = next((name for name in names if not HOST_RE.match(name)), None)
        if bad is not None:
            raise ConfigError(f"{what}: {bad!r} is not a host name (letters, digits, '.', '-', '_')")
        hosts += names
    if len(hosts) > MAX_HOSTS:
        raise ConfigError(f"{what}: more than {MAX_HOSTS} hosts")
    return hosts


def scontrol_hostnames(text: str, what: str, scontrol: str) -> list[str]:
    """The host names ``scontrol show hostnames`` makes of ``text`` (Slurm's own reading of its lists)."""
    try:
        proc = subprocess.run([scontrol, "show", "hostnames", text], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(f"{what}: 'scontrol show hostnames' failed: {err}") from None
    said = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[0]
    hosts = proc.stdout.split()
    if proc.returncode != 0 or not hosts:
        raise ConfigError(f"{what}: 'scontrol show hostnames' refused it: {said}")
    bad = next((name for name in hosts if not HOST_RE.match(name)), None)
    if bad is not None:
        raise ConfigError(f"{what}: scontrol gave {bad!r}, which is not a host name")
    return hosts


def expand_tasks_per_node(text: str, n_hosts: int, what: str | None = None) -> list[int]:
    """``SLURM_TASKS_PER_NODE`` (``2(x3),1``: 2 tasks on each of 3 nodes, then 1) as one count per host."""
    what = what or f"tasks per node {text!r}"
    counts: list[int] = []
    for item in text.split(","):
        match = _TASKS_RE.match(item.strip())
        if not match or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
            raise ConfigError(f"{what}: {item.strip()!r} is not N or N(xM) (N, M >= 1)")
        if int(match.group(1)) > MAX_SESSION_RANKS:
            raise ConfigError(f"{what}: {match.group(1)} tasks on a node, more than a session's {MAX_SESSION_RANKS} "
                              "ranks: a typo?")
        repeat = int(match.group(2) or 1)
        if len(counts) + repeat > MAX_HOSTS:
            raise ConfigError(f"{what}: more than {MAX_HOSTS} nodes")
        counts += [int(match.group(1))] * repeat
    if len(counts) != n_hosts:
        raise ConfigError(f"{what}: it counts tasks on {len(counts)} nodes, but the node list has {n_hosts}")
    return counts


def _positive_count(environ: Mapping[str, str], name: str) -> int:
    text = environ[name].strip()
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{name}={environ[name]!r} is not a count >= 1")
    if int(text) > MAX_SESSION_RANKS:
        raise ConfigError(f"{name}={environ[name]!r}: more than a session's {MAX_SESSION_RANKS} ranks: a typo?")
    return int(text)


def _slurm_gpus(environ: Mapping[str, str]) -> tuple[int, str]:
    """GPUs per node of a Slurm job (0 without any) and the variable that said so."""
    if environ.get("SLURM_GPUS_ON_NODE", "").strip() not in ("", "0"):
        return _positive_count(environ, "SLURM_GPUS_ON_NODE"), "SLURM_GPUS_ON_NODE"
    ids = environ.get("SLURM_JOB_GPUS", "").strip()
    if ids:
        if not all(part.strip().isdigit() for part in ids.split(",")):
            raise ConfigError(f"SLURM_JOB_GPUS={ids!r} is not a list of GPU ids (0,1,...)")
        return len(ids.split(",")), "SLURM_JOB_GPUS"
    return 0, ""


def slurm_allocation(environ: Mapping[str, str], scontrol: str | None, max_per_host: int = 0) -> Allocation:
    """The workers of the Slurm job whose variables ``environ`` holds (``scontrol``: its path, or None)."""
    name = "SLURM_JOB_NODELIST" if environ.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    nodelist = environ[name]
    what = f"{name}={nodelist!r}"
    hosts = scontrol_hostnames(nodelist, what, scontrol) if scontrol else expand_hostlist(nodelist, what)
    said = [f"{name}={nodelist}"]
    gpus, gpu_variable = _slurm_gpus(environ)
    if gpus:
        said.append(f"{gpu_variable}={environ[gpu_variable]}")
        origin = f"{gpu_variable}={environ[gpu_variable]!r}"
        groups = [Group(host, [f"cuda{i}" for i in range(gpus)], [origin]) for host in hosts]
    else:
        origin = what
        if environ.get("SLURM_TASKS_PER_NODE"):
            text = environ["SLURM_TASKS_PER_NODE"]
            origin = f"SLURM_TASKS_PER_NODE={text!r}"
            counts = expand_tasks_per_node(text, len(hosts), origin)
            said.append(f"SLURM_TASKS_PER_NODE={text}")
        elif environ.get("SLURM_NTASKS_PER_NODE"):
            counts = [_positive_count(environ, "SLURM_NTASKS_PER_NODE")] * len(hosts)
            origin = f"SLURM_NTASKS_PER_NODE={environ['SLURM_NTASKS_PER_NODE']!r}"
            said.append(f"SLURM_NTASKS_PER_NODE={environ['SLURM_NTASKS_PER_NODE']}")
        else:
            counts = [1] * len(hosts)
        _check_counts(zip(hosts, counts), origin, max_per_host, environ)
        groups = [Group(host, [f"cpu{i}" for i in range(n)], [origin]) for host, n in zip(hosts, counts)]
    return _allocation(f"the Slurm allocation ({', '.join(said)})", groups, environ, max_per_host, what)


# ----- PBS / Torque ---------------------------------------------------------------------------------------------------
def _read_lines(path: str, what: str) -> list[tuple[int, str]]:
    """(line number, text) of the non-blank lines of ``path``, ``#`` comments removed; ``path`` must be a regular
    file (a FIFO or a device is refused at once) of at most :data:`FILE_LIMIT` bytes."""
    try:
        text = read_bounded(path, FILE_LIMIT, what.split("=")[0].split(" ")[0]).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{what}: cannot be read: {err}") from None
    lines = [(n, line.split("#", 1)[0].strip()) for n, line in enumerate(text.splitlines(), 1)]
    lines = [(n, line) for n, line in lines if line]
    if not lines:
        raise ConfigError(f"{what}: lists no host")
    return lines


def _counted_hosts(lines: list[tuple[int, str]], what: str) -> dict[str, tuple[int, list[str]]]:
    """One host name per line -> (lines per host, where they are), in the order hosts first appear."""
    counts: dict[str, tuple[int, list[str]]] = {}
    for lineno, line in lines:
        if not HOST_RE.match(line):
            raise ConfigError(f"{what}:{lineno}: {line!r} is not a host name")
        count, origins = counts.get(line, (0, []))
        counts[line] = (count + 1, origins if origins else [f"{what}:{lineno}"])
    return counts


def pbs_allocation(environ: Mapping[str, str], max_per_host: int = 0) -> Allocation:
    """The workers of the PBS/Torque job whose variables ``environ`` holds: one per line of ``PBS_NODEFILE`` (a
    host appears once per allocated task), or one per line of Torque's ``PBS_GPUFILE`` (``HOST-gpuN``)."""
    nodefile = environ["PBS_NODEFILE"]
    said = f"PBS_NODEFILE={nodefile}"
    what = f"PBS_NODEFILE={nodefile!r}"
    counts = _counted_hosts(_read_lines(nodefile, what), what)
    _check_counts(((host, n) for host, (n, _) in counts.items()), what, max_per_host, environ)
    groups = [Group(host, [f"cpu{i}" for i in range(n)], origins) for host, (n, origins) in counts.items()]
    gpufile = environ.get("PBS_GPUFILE", "").strip()
    if gpufile:
        what = f"PBS_GPUFILE={gpufile!r}"
        by_host: dict[str, Group] = {}
        for lineno, line in _read_lines(gpufile, what):
            match = _GPU_LINE_RE.match(line)
            if not match or not HOST_RE.match(match.group(1)):
                raise ConfigError(f"{what}:{lineno}: {line!r} is not HOST-gpuN")
            group = by_host.setdefault(match.group(1), Group(match.group(1), [], [f"{what}:{lineno}"]))
            group.devices.append(f"cuda{int(match.group(2))}")
        groups = list(by_host.values())
        said += f", PBS_GPUFILE={gpufile}"
    return _allocation(f"the PBS allocation ({said})", groups, environ, max_per_host, what)


# ----- Open MPI hostfiles ---------------------------------------------------------------------------------------------
def read_hostfile(path: str, environ: Mapping[str, str], max_per_host: int = 0) -> Allocation:
    """Open MPI's hostfile: ``HOST [slots=N] [max_slots=M]`` lines, ``#`` comments; one cpu worker per slot (a host
    without ``slots=`` gets one; a host on several lines, their sum)."""
    what = f"--hostfile {path}"
    slots: dict[str, tuple[int, list[str]]] = {}
    for lineno, line in _read_lines(path, what):
        host, *settings = line.split()
        if not HOST_RE.match(host):
            raise ConfigError(f"{what}:{lineno}: {host!r} is not a host name")
        count = 1
        for setting in settings:
            key, equals, value = setting.partition("=")
            if key not in HOSTFILE_KEYS:
                allowed = ", ".join(f"{k}=N" for k in HOSTFILE_KEYS)
                raise ConfigError(f"{what}:{lineno}: {setting!r} is not one of {allowed}")
            if not equals or not value.isdigit() or int(value) < 1:
                raise ConfigError(f"{what}:{lineno}: {setting!r} needs a count >= 1 ({key}=N)")
            if key == "slots":
                count = int(value)
        total, origins = slots.get(host, (0, []))
        slots[host] = (total + count, [*origins, f"{path}:{lineno}"])
        _check_counts([(host, total + count)], f"{what}:{lineno}", max_per_host, environ)
    groups = [Group(host, [f"cpu{i}" for i in range(n)], origins) for host, (n, origins) in slots.items()]
    return _allocation(f"--hostfile {path}", groups, environ, max_per_host, what)


# ----- together -------------------------------------------------------------------------------------------------------
def _is_this_host(host: str, environ: Mapping[str, str]) -> bool:
    """Whether an allocation's host name names this machine: its name or short name, a name every machine gives
    itself (``localhost``, a loopback address), or Slurm's name for it."""
    here = socket.gethostname()
    return (host == here or host.split(".")[0] == here.split(".")[0] or host in LOOPBACK_NAMES
            or host.startswith("127.") or host == environ.get("SLURMD_NODENAME"))


def _where(origins: list[str]) -> str:
    return " and ".join(dict.fromkeys(origins))


def _check_counts(counts: object, origin: str, max_per_host: int, environ: Mapping[str, str]) -> None:
    """ConfigError naming ``origin`` when a (host, ranks) pair of ``counts`` asks for more than the per-host limit."""
    limit, said = ranks_per_host_limit(max_per_host)
    for host, count in counts:  # type: ignore[attr-defined]
        if count > limit:
            here = f"this host ({host})" if _is_this_host(host, environ) else host
            raise ConfigError(f"{origin}: {count} ranks on {here}, more than {said}: a typo? To start them, set "
                              f"MAX_RANKS_PER_HOST={count}")


def _same_machine(groups: list[Group], environ: Mapping[str, str], what: str) -> list[Group]:
    """``groups`` with every group of this machine merged into its first (under this machine's name: cpu workers
    summed, GPUs joined); ConfigError naming both places for a GPU given twice, or for another machine named by a
    short and a long name."""
    here = socket.gethostname()
    mine = [g for g in groups if _is_this_host(g.host, environ)]
    others = [g for g in groups if not _is_this_host(g.host, environ)]
    merged: list[Group] = []
    if mine:
        cpus = sum(1 for g in mine for d in g.devices if d.startswith("cpu"))
        gpus: dict[str, list[str]] = {}
        for g in mine:
            for d in g.devices:
                if d.startswith("cuda"):
                    if d in gpus:
                        raise ConfigError(f"{what}: {_where(gpus[d])} ({d} on {mine[0].host}) and {_where(g.origins)} "
                                          f"({d} on {g.host}) give this machine's {d} twice: name each GPU once")
                    gpus[d] = g.origins
        origins = [o for g in mine for o in g.origins]
        merged.append(Group(here, [f"cpu{i}" for i in range(cpus)] + list(gpus), origins))
    by_short: dict[str, Group] = {}
    for g in others:
        short = g.host.split(".")[0]
        seen = by_short.get(short)
        if seen is not None and seen.host != g.host and ("." not in seen.host or "." not in g.host):
            raise ConfigError(f"{_where(seen.origins)} ({seen.host!r}) and {_where(g.origins)} ({g.host!r}) name the "
                              "same machine by a short and a long name: name it once")
        by_short.setdefault(short, g)
    return merged + others


def _allocation(source: str, groups: list[Group], environ: Mapping[str, str], max_per_host: int = 0,
                what: str = "") -> Allocation:
    """The Allocation of ``groups``: this machine's first, under the name the launch plan knows it by, each machine
    once (:func:`_same_machine`), no host above the per-host limit, no more ranks than a session's."""
    ordered = [g for g in _same_machine(groups, environ, what or source) if g.devices]
    if not ordered:
        raise ConfigError(f"{source}: no worker")
    for g in ordered:
        _check_counts([(g.host, len(g.devices))], _where(g.origins), max_per_host, environ)
    total = sum(len(g.devices) for g in ordered)
    if total > MAX_SESSION_RANKS:
        raise ConfigError(f"{source}: {total} ranks in all, more than a session's {MAX_SESSION_RANKS}")
    return Allocation(source=source, devices=";".join(f"{g.host}:{','.join(g.devices)}" for g in ordered))


def allocation_of_hosts(source: str, slots: list[tuple[str, int]], kind: str,
                        environ: Mapping[str, str]) -> Allocation:
    """The Allocation of hosts with a number of slots each (``kind`` devices: ``cpu`` or ``cuda``, numbered from 0
    on each host), this machine's first; ConfigError when no host has a slot.

    >>> allocation_of_hosts("discovery", [("node7", 2), ("node8", 1)], "cpu", {}).devices
    'node7:cpu0,cpu1;node8:cpu0'
    """
    return _allocation(source, [Group(host, [f"{kind}{i}" for i in range(n)], [source]) for host, n in slots], environ)


def allocation_source(environ: Mapping[str, str], hostfile: str | None) -> str | None:
    """Which allocation :func:`read_allocation` would read, in words (None: none); reads nothing.

    >>> allocation_source({"PBS_NODEFILE": "/var/spool/pbs/aux/42"}, None)
    'the PBS allocation'
    """
    if hostfile:
        return f"--hostfile {hostfile}"
    if environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST"):
        return "the Slurm allocation"
    if environ.get("PBS_NODEFILE"):
        return "the PBS allocation"
    return None


def read_allocation(environ: Mapping[str, str], hostfile: str | None = None,
                    scontrol: str | None = "", max_per_host: int = 0) -> Allocation | None:
    """The workers of ``--hostfile``, else of the Slurm or PBS job ``environ`` describes; None outside any.

    ``scontrol``: the program that expands Slurm's host lists ('' finds ``scontrol`` on PATH; None: parse them here).
    ``max_per_host``: MAX_RANKS_PER_HOST (0: its default, :data:`RANKS_PER_CORE` x this host's cores).
    """
    if hostfile:
        return read_hostfile(hostfile, environ, max_per_host)
    if environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST"):
        return slurm_allocation(environ, shutil.which("scontrol") if scontrol == "" else scontrol, max_per_host)
    if environ.get("PBS_NODEFILE"):
        return pbs_allocation(environ, max_per_host)
    return None
