"""Why ranks did not start: the line a session ends with when a host never answers, a name does not resolve or the
remote Python cannot start (``STARTUP_TIMEOUT``, and mpiexec's own report of a daemon that failed).

mpiexec starts a daemon on every other host over ``ssh`` (PRRTE), and starts no rank before all of them report. So a
rank that never reports points first at a host whose ssh is still connecting or failed; only when every daemon is up
does it point at the ranks themselves. :func:`ssh_options` gives ssh a connect timeout and batch mode (no password
prompt) unless the user configured ssh for mpiexec; :func:`startup_report` explains a missed deadline from what the
launcher sees on this host: each ssh process and its TCP connection (``/proc``: still connecting, or connected), and
what ssh printed; :func:`daemon_failure` explains mpiexec's report of a daemon that did not start.

Example
-------
>>> ssh_options({}, startup_timeout=60)
{'PRTE_MCA_plm_ssh_args': '-x -o ConnectTimeout=30 -o BatchMode=yes'}
>>> ssh_options({}, startup_timeout=60, config="Host *\\n    ConnectTimeout 120\\n")
{'PRTE_MCA_plm_ssh_args': '-x -o BatchMode=yes'}
>>> ssh_options({"PRTE_MCA_plm_ssh_args": "-p 2222"}, 60), ssh_options({"PRTE_MCA_plm_ssh_agent": "my-agent"}, 60)
({}, {})
>>> tail = "ssh: Could not resolve hostname node9: Name or service not known\\n  Remote host:   node9\\n"
>>> daemon_failure(tail, 255, ["node9"])
"mpiexec's daemon on node9 did not start: ssh: Could not resolve hostname node9: Name or service not known \
(the name does not resolve: check its spelling, /etc/hosts or DNS) (mpiexec exit code 255)"
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from theanompi.core.no_follow import read_bounded
from theanompi.launch.process_tree import ProcessTree, command_line
from theanompi.session.spec import RankSpec

#: ssh's own settings in mpiexec's (PRRTE's) environment: where the user set one, theanompi adds none
SSH_SETTINGS = ("PRTE_MCA_plm_ssh_args", "OMPI_MCA_plm_ssh_args", "PRTE_MCA_plm_rsh_args")
SSH_AGENTS = ("PRTE_MCA_plm_ssh_agent", "OMPI_MCA_plm_ssh_agent", "PRTE_MCA_plm_rsh_agent")
#: what ssh says -> what it means, for the line the session ends with
SSH_CAUSES = (
    (re.compile(r"Could not resolve hostname|Name or service not known|Temporary failure in name resolution"),
     "the name does not resolve: check its spelling, /etc/hosts or DNS"),
    (re.compile(r"timed out", re.I), "the host does not answer: is it up, is the address right, does a firewall drop "
                                     "ssh?"),
    (re.compile(r"Connection refused"), "no ssh server listens there"),
    (re.compile(r"No route to host|Network is unreachable"), "the host cannot be reached from here"),
    (re.compile(r"Permission denied|Host key verification failed"),
     "ssh cannot log in without a password or a prompt (BatchMode): set up its keys and known_hosts"),
    (re.compile(r"command not found|No such file or directory"),
     "the host lacks the launcher's virtualenv at the same path"),
)
_REMOTE_HOST_RE = re.compile(r"Remote host:\s*(\S+)")
#: /proc/net/tcp's states that matter here
_TCP_STATES = {"02": "connecting", "01": "connected"}


def ssh_config_text() -> str:
    """The user's and the system's ssh client settings (``~/.ssh/config``, ``/etc/ssh/ssh_config``), as text."""
    texts = []
    for path in (Path.home() / ".ssh" / "config", Path("/etc/ssh/ssh_config")):
        try:
            texts.append(read_bounded(path, 1 << 20, "ssh config").decode(errors="replace"))
        except (OSError, ValueError):  # missing, unreadable, not a regular file: nothing configured there
            continue
    return "\n".join(texts)


def ssh_options(environ: Mapping[str, str], startup_timeout: float, config: str = "") -> dict[str, str]:
    """What mpiexec's environment gets so that its ssh neither waits minutes for a host that never answers nor for a
    password: ``ConnectTimeout`` (half of STARTUP_TIMEOUT, 30 s without one) and ``BatchMode``, each unless ssh's
    ``config`` text (:func:`ssh_config_text`) sets it. Nothing where the user set ssh's arguments for mpiexec or
    another launch agent (they configured it)."""
    if any(environ.get(name) for name in SSH_SETTINGS):
        return {}
    agent = next((environ[name] for name in SSH_AGENTS if environ.get(name)), "")
    if agent and [os.path.basename(word) for word in agent.split()] not in (["ssh"], ["ssh", ":", "rsh"]):
        return {}
    configured = {line.split()[0].lower() for line in config.splitlines()
                  if line.strip() and not line.lstrip().startswith("#")}
    seconds = max(1, math.ceil(startup_timeout / 2)) if startup_timeout else 30
    words = ["-x"] + ([] if "connecttimeout" in configured else ["-o", f"ConnectTimeout={seconds}"])
    words += [] if "batchmode" in configured else ["-o", "BatchMode=yes"]
    return {"PRTE_MCA_plm_ssh_args": " ".join(words)}


def _cause(text: str) -> str:
    return next((words for pattern, words in SSH_CAUSES if pattern.search(text)), "")


def _ssh_lines(tail: str, host: str) -> list[str]:
    """What ssh printed about ``host`` (PRRTE's own help text left out)."""
    lines = [line.strip() for line in tail.splitlines()]
    return [line for line in lines if line and "Remote host:" not in line and "Local host:" not in line
            and (line.startswith("ssh:") or (host in line and _cause(line)) or "banner exchange" in line)]


def daemon_failure(tail: str, code: int, hosts: list[str]) -> str | None:
    """One line for an mpiexec that failed because its daemon on another host (of ``hosts``) did not start (None for
    any other failure): the host, what ssh said, what it likely means. PRRTE's own report ("Remote host: ...") names
    the host where it reaches stderr; else the host is the one ssh's message names."""
    match = _REMOTE_HOST_RE.search(tail)
    host = match.group(1) if match and "daemon" in tail else next(
        (h for h in hosts if any(h in line for line in _ssh_lines(tail, h))), None)
    if host is None:
        return None
    said = _ssh_lines(tail, host)
    cause = _cause(" ".join(said))
    detail = f": {said[0]}" if said else ""
    return (f"mpiexec's daemon on {host} did not start{detail}"
            f"{f' ({cause})' if cause else ' (ssh, name resolution or the remote Python)'} (mpiexec exit code {code})")


def _ssh_state(pid: int) -> str:
    """'connecting', 'connected' or '' for the TCP connection of the ssh process ``pid`` (from /proc)."""
    inodes = set()
    try:
        for fd in os.scandir(f"/proc/{pid}/fd"):
            target = os.readlink(fd.path)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        tables = [Path(f"/proc/{pid}/net/tcp").read_text(), Path(f"/proc/{pid}/net/tcp6").read_text()]
    except OSError:
        return ""
    for line in "\n".join(tables).splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[9] in inodes and fields[3] in _TCP_STATES:
            return _TCP_STATES[fields[3]]
    return ""


def _host_of_ssh(args: list[str], hosts: set[str]) -> str | None:
    return next((arg for arg in args[1:] if arg in hosts), None)


def _remote_causes(tree: ProcessTree, hosts: list[str], tail: str, timeout: float) -> dict[str, str]:
    """host -> why its daemon has not reported, for the hosts whose ssh is still connecting, connected without a
    daemon reporting, or failed."""
    ssh_state: dict[str, str] = {}
    for info in tree.alive():
        args = command_line(info.pid)
        host = _host_of_ssh(args, set(hosts)) if args and os.path.basename(args[0]) == "ssh" else None
        if host is not None:
            ssh_state[host] = _ssh_state(info.pid) or ssh_state.get(host, "running")
    causes = {}
    for host in hosts:
        said = _ssh_lines(tail, host)
        state = ssh_state.get(host)
        if state == "connecting":
            causes[host] = (f"{host} does not answer: ssh has been connecting to it for {timeout:g} s (the host is "
                            "down, the address unreachable, or a firewall drops ssh)")
        elif state == "connected":
            causes[host] = (f"ssh reached {host} but mpiexec's daemon there never reported: its ssh server does not "
                            "answer or asks for a password (BatchMode), or the daemon or the remote Python cannot "
                            "start there (the same virtualenv at the same path?)")
        elif said:
            cause = _cause(" ".join(said))
            causes[host] = f"ssh to {host} failed: {said[0]}{f' ({cause})' if cause else ''}"
        elif state is not None:
            causes[host] = f"mpiexec's daemon on {host} has not reported (ssh is still running)"
    return causes


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return True


def startup_report(timeout: float, silent: list[int], ranks: list[RankSpec], tree: ProcessTree, tail: str) -> str:
    """The one line of a session whose ranks ``silent`` did not report their start within ``timeout`` seconds:
    which ranks on which hosts, and the likely cause (see the module's docstring)."""
    hosts = list(dict.fromkeys(ranks[r].device.host for r in silent if not ranks[r].device.is_local))
    who = ", ".join(ranks[r].describe(r) for r in silent[:4]) + (f" and {len(silent) - 4} more"
                                                                 if len(silent) > 4 else "")
    head = f"STARTUP_TIMEOUT={timeout:g}: {who} did not start within {timeout:g} s"
    causes = _remote_causes(tree, hosts, tail, timeout)
    for host in hosts:
        if host not in causes and not _resolves(host):
            causes[host] = f"{host} does not resolve (name resolution: check its spelling, /etc/hosts or DNS)"
    if causes:
        return f"{head}: {'; '.join(causes.values())}"
    where = ", ".join(hosts + (["this host"] if any(ranks[r].device.is_local for r in silent) else []))
    return (f"{head} on {where}: the ranks' Python did not get to theanompi (the same virtualenv at the same path on "
            "every host? the lines above say more), or a loaded machine starts them slowly: raise STARTUP_TIMEOUT")
