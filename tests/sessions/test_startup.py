"""Sessions whose ranks never start, and the processes every way of ending leaves (issue 39, items 3, 4 and 6).

Hosts that never answer are of this test's own making, in network namespaces named ``tm39-PID-*`` (needs root;
skipped otherwise), removed afterwards whatever happens: the launcher runs in ``tm39-PID-l``, which reaches
``10.213.39.2`` (namespace ``tm39-PID-s``: a listener there accepts TCP on port 22 and never says a word) and
``10.213.39.3`` (a neighbour entry with a MAC nobody has: every packet is dropped, nothing answers). No address
outside these namespaces is used; a name lookup from inside finds no route to any resolver.

Every process a launcher starts carries a marker in its environment (``THEANOMPI_TEST_MARK``); the tests count the
processes carrying it before, during and after each way a session ends: finished, a failed rank, a host that never
answers, a name that does not resolve, ranks that never start, SIGTERM and SIGINT during start-up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ASSETS, marked_processes, write_cfg

HERE = socket.gethostname()
TMLAUNCHER = str(Path(sys.executable).parent / "tmlauncher")
LAUNCHER_ADDRESS, LISTENER, SILENT = "10.213.39.1", "10.213.39.2", "10.213.39.3"


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class SilentHosts:
    """The namespaces of the module docstring; :meth:`destroy` removes them and what runs in them."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.launcher_ns = f"{prefix}-l"
        self.listener_ns = f"{prefix}-s"
        self.listener: subprocess.Popen | None = None

    def build(self) -> None:
        for ns in (self.launcher_ns, self.listener_ns):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", "tm39a", "netns", self.launcher_ns, "type", "veth", "peer", "name", "tm39b", "netns",
            self.listener_ns)
        _ip("-n", self.launcher_ns, "addr", "add", f"{LAUNCHER_ADDRESS}/24", "dev", "tm39a")
        _ip("-n", self.listener_ns, "addr", "add", f"{LISTENER}/24", "dev", "tm39b")
        _ip("-n", self.launcher_ns, "link", "set", "tm39a", "up")
        _ip("-n", self.listener_ns, "link", "set", "tm39b", "up")
        _ip("-n", self.launcher_ns, "neigh", "add", SILENT, "lladdr", "02:00:00:39:00:03", "dev", "tm39a", "nud",
            "permanent")
        code = (f"import socket, time\ns = socket.socket()\ns.bind(({LISTENER!r}, 22))\ns.listen(64)\n"
                "print('listening', flush=True)\ntime.sleep(3600)\n")
        env = {k: v for k, v in os.environ.items() if k != "THEANOMPI_TEST_MARK"}  # it lives beyond a test
        self.listener = subprocess.Popen(["ip", "netns", "exec", self.listener_ns, sys.executable, "-c", code],
                                         stdout=subprocess.PIPE, text=True, env=env)
        assert self.listener.stdout is not None and self.listener.stdout.readline().strip() == "listening"

    def pids(self) -> list[int]:
        found = []
        for ns in (self.launcher_ns, self.listener_ns):
            proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            found += [int(p) for p in proc.stdout.split()]
        return found

    def destroy(self) -> None:
        if self.listener is not None:
            self.listener.kill()
            self.listener.wait()
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for ns in (self.launcher_ns, self.listener_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # takes the veth pair along

    def launch(self, *args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.launcher_ns, TMLAUNCHER, *args], cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("ssh") is None:
        pytest.skip("needs root, ip(8) and ssh(1)")
    made = SilentHosts(f"tm39-{os.getpid()}")
    try:
        made.build()
    except OSError as err:
        made.destroy()
        pytest.skip(f"network namespaces cannot be made here: {err}")
    yield made
    made.destroy()
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert made.prefix not in left


# ----- counting processes ---------------------------------------------------------------------------------------------
pytestmark = pytest.mark.usefixtures("ends_its_processes")  # and kills what a failed test leaves


marked = marked_processes  # (pid, name) of every live process (but this one) whose environment carries the mark


def marked_environment(**extra: str) -> tuple[str, dict[str, str]]:
    """The test's mark (``ends_its_processes``'s) and the environment of its launch."""
    mark = os.environ["THEANOMPI_TEST_MARK"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "PRTE_MCA_plm", "OMPI_MCA_plm"))}
    return mark, {**env, **extra}


def wait_for(test, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = test()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"never saw {what} within {timeout} s")


def finish(proc: subprocess.Popen, mark: str, timeout: float = 120) -> tuple[int, str, str]:
    """Wait for the launcher; no process carrying ``mark`` may outlive it."""
    out, err = proc.communicate(timeout=timeout)
    assert marked(mark) == [], f"left behind: {marked(mark)}\n{err}"
    return proc.returncode, out, err


def last_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert lines, err
    return lines[-1]


# ----- hosts that never answer, names that do not resolve -------------------------------------------------------------
def hostfile(tmp_path: Path, host: str) -> Path:
    path = tmp_path / "hosts"
    path.write_text(f"{HERE} slots=1\n{host} slots=1\n")
    return path


@pytest.mark.parametrize("host, said", [
    (SILENT, f"ssh: connect to host {SILENT} port 22: Connection timed out"),
    (LISTENER, "Connection timed out during banner exchange"),
])
def test_a_host_that_never_answers_ends_the_session_naming_it(hosts, tmp_path, host, said):
    """ssh gets ConnectTimeout (half of STARTUP_TIMEOUT) and BatchMode: it gives up, mpiexec fails, the line names
    the host, what ssh said and what it means."""
    mark, env = marked_environment()
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES=None, RUN_DIR="run", STARTUP_TIMEOUT=8)  # ssh: ConnectTimeout=4
    start = time.monotonic()
    proc = hosts.launch(f"-cfg={cfg}", "--hostfile", str(hostfile(tmp_path, host)), env=env, cwd=tmp_path)
    code, _, err = finish(proc, mark)
    assert code != 0 and time.monotonic() - start < 60
    line = last_line(err)
    assert line.startswith(f"tmlauncher: session failed: mpiexec's daemon on {host} did not start: "), err
    assert said in line and "the host does not answer" in line, line


@pytest.mark.parametrize("host, cause", [
    (SILENT, f"{SILENT} does not answer: ssh has been connecting to it for 4 s"),
    (LISTENER, f"ssh reached {LISTENER} but mpiexec's daemon there never reported"),
])
def test_startup_timeout_ends_a_session_whose_ssh_the_user_configured_to_wait(hosts, tmp_path, host, cause):
    """The user's own ssh settings (no connect timeout) are left alone: STARTUP_TIMEOUT ends the session, naming the
    host and what its ssh is doing; ssh, in a process group of its own, is ended with the rest."""
    mark, env = marked_environment(PRTE_MCA_plm_ssh_args="-x -o ConnectTimeout=300 -o BatchMode=yes")
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES=None, RUN_DIR="run", STARTUP_TIMEOUT=4)
    start = time.monotonic()
    proc = hosts.launch(f"-cfg={cfg}", "--hostfile", str(hostfile(tmp_path, host)), env=env, cwd=tmp_path)
    wait_for(lambda: [p for p in marked(mark) if p[1] == "ssh"], 60, "ssh")
    code, _, err = finish(proc, mark)
    assert code == 124 and time.monotonic() - start < 60, err
    line = last_line(err)
    assert line.startswith("tmlauncher: session failed: STARTUP_TIMEOUT=4: rank 0 (worker on "), line
    assert cause in line, line


def test_a_name_that_does_not_resolve_is_named(hosts, tmp_path):
    mark, env = marked_environment()
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES=None, RUN_DIR="run", STARTUP_TIMEOUT=10)
    proc = hosts.launch(f"-cfg={cfg}", "--hostfile", str(hostfile(tmp_path, "tm39-nowhere")), env=env, cwd=tmp_path)
    code, _, err = finish(proc, mark)
    line = last_line(err)
    assert code != 0 and "tm39-nowhere" in line and "the name does not resolve" in line, line


def test_sigterm_while_a_host_never_answers_leaves_nothing_behind(hosts, tmp_path):
    """Stopped during start-up as Ctrl-C or a scheduler would: every process goes, ssh included."""
    mark, env = marked_environment(PRTE_MCA_plm_ssh_args="-x -o ConnectTimeout=300 -o BatchMode=yes")
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES=None, RUN_DIR="run")
    proc = hosts.launch(f"-cfg={cfg}", "--hostfile", str(hostfile(tmp_path, SILENT)), env=env, cwd=tmp_path)
    wait_for(lambda: [p for p in marked(mark) if p[1] == "ssh"], 60, "ssh")
    during = marked(mark)
    assert {"tmlauncher", "ssh"} <= {name for _, name in during} or len(during) >= 3, during
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc, mark, timeout=60)
    assert code == 143 and last_line(err) == ("tmlauncher: session failed: interrupted (SIGTERM); every rank was "
                                              "stopped"), err


# ----- this host alone: every way a session ends ----------------------------------------------------------------------
def launch_here(tmp_path: Path, env: dict[str, str], sigint_ignored: bool = False, **keys: object) -> subprocess.Popen:
    """The launcher on this host; ``sigint_ignored``: started as a script's background job is (SIGINT ignored)."""
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", **keys)
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    return subprocess.Popen([TMLAUNCHER, f"-cfg={cfg}"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ignore)


@pytest.mark.parametrize("case", ["finished", "failed rank"])
def test_a_session_that_ends_leaves_no_process(tmp_path, case):
    mark, env = marked_environment()
    assert marked(mark) == []
    keys = {"N_EPOCHS": 1} if case == "finished" else {"MODELFILE": str(ASSETS / "contract_models.py"),
                                                        "MODELCLASS": "RaisesMidEpoch"}
    proc = launch_here(tmp_path, env, **keys)
    wait_for(lambda: len(marked(mark)) >= 3, 120, "the launcher, mpiexec and ranks")  # the count sees them
    code, _, err = finish(proc, mark)
    assert (code == 0) == (case == "finished"), err


def test_ranks_that_never_start_end_the_session_at_startup_timeout(tmp_path):
    """A rank whose Python hangs before theanompi (here: a sitecustomize that sleeps) is named, on this host, with
    the likely cause; nothing is left running."""
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text("import os, time\nif 'OMPI_COMM_WORLD_RANK' in os.environ:\n"
                                          "    time.sleep(600)\n")
    pythonpath = os.pathsep.join([str(hang), os.environ.get("PYTHONPATH", "")])
    mark, env = marked_environment(PYTHONPATH=pythonpath)
    start = time.monotonic()
    proc = launch_here(tmp_path, env, STARTUP_TIMEOUT=5)
    code, _, err = finish(proc, mark)
    assert code == 124 and time.monotonic() - start < 90, err
    line = last_line(err)
    assert line.startswith("tmlauncher: session failed: STARTUP_TIMEOUT=5: rank 0 (worker on cpu0), rank 1 (worker "
                           "on cpu1) did not start within 5 s on this host: the ranks' Python did not get to "
                           "theanompi"), line


@pytest.mark.parametrize("sig, code, said, sigint_ignored", [
    (signal.SIGINT, 130, "Ctrl-C", False),
    (signal.SIGINT, 130, "Ctrl-C", True),  # `tmlauncher ... &` in a script: SIGINT ignored, yet `kill -INT` stops it
    (signal.SIGTERM, 143, "SIGTERM", False),
], ids=["Ctrl-C", "Ctrl-C to a background job", "SIGTERM"])
def test_a_signal_during_start_up_leaves_no_process(tmp_path, sig, code, said, sigint_ignored):
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text("import os, time\nif 'OMPI_COMM_WORLD_RANK' in os.environ:\n"
                                          "    time.sleep(600)\n")
    mark, env = marked_environment(PYTHONPATH=os.pathsep.join([str(hang), os.environ.get("PYTHONPATH", "")]))
    proc = launch_here(tmp_path, env, sigint_ignored)
    wait_for(lambda: len([p for p in marked(mark) if p[1].startswith("python")]) >= 2, 120, "the ranks' Pythons")
    proc.send_signal(sig)
    returncode, _, err = finish(proc, mark, timeout=60)
    assert returncode == code and last_line(err) == (f"tmlauncher: session failed: interrupted ({said}); every rank "
                                                     "was stopped"), err
