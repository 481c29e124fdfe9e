"""Test-session setup and helpers for running real mpiexec sessions.

pytensor is configured (BLAS, C backend, shared cache) before any test imports it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from theanompi.backend.pytensor_config import configure_pytensor
from theanompi.comm.exchange.base import Exchanger, PendingSum
from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

configure_pytensor()

ROOT = Path(__file__).resolve().parent.parent
MPI_SCRIPTS = ROOT / "tests" / "mpi_scripts"
ASSETS = ROOT / "tests" / "assets"


def stress_reps(default: int) -> int:
    """Repetitions of the protocol stress tests: THEANOMPI_STRESS_REPS overrides the suite's default."""
    return int(os.environ.get("THEANOMPI_STRESS_REPS", default))


def run_python_in_cache(code: str, cache: Path, *args: str, timeout: float = 300) -> tuple[dict, str]:
    """Run ``python -c code args`` in a fresh interpreter whose theanompi cache (compile cache included) is
    ``cache``; fail the test on non-zero exit; return (its last stdout line as JSON, its stderr)."""
    env = {**os.environ, "THEANOMPI_CACHE_DIR": str(cache)}
    for own_setting in ("PYTENSORRC", "PYTENSOR_FLAGS", "THEANOMPI_FUNCTION_CACHE"):  # a user's compiledir would win
        env.pop(own_setting, None)
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def run_mpi(script: str, n: int, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``tests/mpi_scripts/SCRIPT`` on ``n`` real MPI ranks; fail the test on non-zero exit."""
    argv = [find_mpiexec(), "--oversubscribe", "-n", str(n), sys.executable, str(MPI_SCRIPTS / script), *args]
    proc = subprocess.run(argv, env=mpiexec_env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"{script} on {n} ranks failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def run_launcher(*args: str, cwd: Path = ROOT, timeout: float = 240,
                 env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``tmlauncher ARGS`` as a user would (in ``env``, default this process's environment); returns
    (process, seconds)."""
    exe = Path(sys.executable).parent / "tmlauncher"
    start = time.perf_counter()
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL, env=env)
    return proc, time.perf_counter() - start


def run_rule_init(cwd: Path, rule: str, timeout: float = 240, **init_kwargs: object) -> subprocess.CompletedProcess:
    """Run ``RULE().init(**init_kwargs)`` and ``rule.wait()`` in a fresh Python process, as a user
    script would; fail the test unless it exits 0. ``init_kwargs`` must be literals (they are repr'd)."""
    script = Path(cwd) / f"launch_{rule.lower()}.py"
    script.write_text(f"import sys\nfrom theanompi import {rule}\nrule = {rule}()\n"
                      f"rule.init(**{init_kwargs!r})\nsys.exit(rule.wait())\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc


def plan(rule: type, *args: object, **kwargs: object) -> tuple:
    """``(spec, ranks)`` of a session asked for with ``Rule().init``'s keywords (planned and checked, not started)."""
    from theanompi.launch.plan import SessionRequest, plan_session

    return plan_session(SessionRequest.from_keywords(rule, *args, **kwargs))


def write_cfg(path: Path, **keys: object) -> Path:
    """A cfg file with the default session's keys, overridden/extended by ``keys`` (None drops one).

    Sessions skip their plots (``PLOTS=false``: ~2 s of matplotlib each) unless a test asks for them."""
    base = {"RULE": "BSP", "MODELFILE": "theanompi.models.mlp", "MODELCLASS": "MLP", "DEVICES": "cpu0,cpu1",
            "N_EPOCHS": 2, "PLOTS": "false"}
    base.update(keys)
    path.write_text("".join(f"{k}={v}\n" for k, v in base.items() if v is not None))
    return path


class SlowRequest:
    """An MPI request stand-in that completes on its ``after``-th Test (or at Wait)."""

    def __init__(self, after: int):
        self.after = after

    def Test(self) -> bool:
        self.after -= 1
        return self.after <= 0

    def Wait(self) -> None:
        self.after = 0


class RecordingExchanger(Exchanger):
    """A 2-worker exchanger stand-in whose workers hold equal values, over views of the buffer ``base``: it
    doubles each slice started with ``start_allreduce_sum`` when that sum completes (after ``tests_to_finish``
    tests, or at wait), and records each slice started (its offsets in ``base``, in order) and its values then."""

    size = 2

    def __init__(self, base: np.ndarray, tests_to_finish: int = 2):
        self.base = base
        self.tests_to_finish = tests_to_finish
        self.started: list[tuple[int, int]] = []  # (start, stop) of each started slice, in the order started
        self.values: list[np.ndarray] = []  # its values when it started

    def allreduce_sum(self, buf):
        buf *= 2
        return buf

    def bcast(self, buf, root=0):
        return buf

    def start_allreduce_sum(self, buf):
        start = (buf.__array_interface__["data"][0] - self.base.__array_interface__["data"][0]) // buf.itemsize
        self.started.append((start, start + buf.size))
        self.values.append(buf.copy())
        return PendingSum(buf, SlowRequest(self.tests_to_finish), on_done=lambda: self.allreduce_sum(buf))


def tensorboard_points(log_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[str]]]:
    """What TensorBoard's own reader (the ``tensorboard`` package's EventAccumulator) finds in ``log_dir`` (its
    subdirectories are other runs): scalar tag -> [(step, value)], text tag -> [text]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    tags = events.Tags()
    scalars = {tag: [(s.step, s.value) for s in events.Scalars(tag)] for tag in tags["scalars"]}
    texts = {tag: [t.tensor_proto.string_val[0].decode() for t in events.Tensors(tag)] for tag in tags["tensors"]}
    return scalars, texts


#: Open MPI puts its session directory under TMPDIR, and a unix socket's path there would be limited to 107 bytes
#: (this Open MPI 5 binds none: PMIx talks TCP): a temp directory longer than this (a deep --basetemp) is not handed
#: to the subprocesses.
MAX_SUBPROCESS_TMPDIR = 60


def marked_processes(mark: str) -> list[tuple[int, str]]:
    """(pid, name) of every live process but this one whose environment carries ``THEANOMPI_TEST_MARK=mark``."""
    needle = f"THEANOMPI_TEST_MARK={mark}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in Path(entry.path, "environ").read_bytes().split(b"\0"):
                found.append((int(entry.name), Path(entry.path, "comm").read_text().strip()))
        except OSError:
            continue
    return found


@pytest.fixture
def ends_its_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A mark (``THEANOMPI_TEST_MARK``, set in this process's environment for the launches that inherit it) for the
    test's processes; afterwards, passed or failed (a launcher killed at its timeout leaves its mpiexec and ranks),
    every process still carrying it is killed."""
    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("THEANOMPI_TEST_MARK", mark)
    yield mark
    for pid, _ in marked_processes(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session", autouse=True)
def suite_tempdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The temp directory of the whole run, ``tmp/`` under pytest's basetemp (pytest keeps the last 3 runs' and
    deletes older ones): ``tempfile``'s default in this process (docstring examples' ``mkdtemp()``, the source file of
    every function pytensor's JAX linker compiles) and ``TMPDIR`` of every subprocess (the launcher, Open MPI's
    session directory, the ranks, ``python -c``), so that a run leaves nothing else in /tmp. (No word here may name
    what marks a test ``mpi``: every test uses this fixture.)"""
    path = tmp_path_factory.mktemp("tmp", numbered=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(path))
        if len(str(path)) <= MAX_SUBPROCESS_TMPDIR:
            patch.setenv("TMPDIR", str(path))
        yield path


@pytest.fixture(scope="module")
def hosts() -> Iterator[object]:
    """host1 and host2: two network namespaces on this machine (tests/assets/netns_hosts.py), made once per test
    module and removed after it; the module's tests are skipped where namespaces cannot be made."""
    sys.path.insert(0, str(ASSETS))
    from netns_hosts import TwoHosts

    try:
        made = TwoHosts.create()
    except OSError as err:
        pytest.skip(f"network namespaces cannot be made here: {err}")
    yield made
    made.destroy()


@pytest.fixture
def cfg_dir(tmp_path):
    """A working directory for a session (its runs/ land there)."""
    os.environ.setdefault("THEANOMPI_CACHE_DIR", str(Path.home() / ".cache" / "theanompi"))
    return tmp_path


# ----- the `mpi` marker (`make test-fast` runs `pytest -m "not mpi and not slow"`) ------------------------------------
# Names whose use means a test starts real processes over MPI: the helpers above, mpiexec itself, or the launcher.
STARTS_MPI_NAMES = frozenset({"run_mpi", "run_launcher", "run_rule_init", "find_mpiexec", "mpiexec_env", "Popen"})
# Text that means a test writes a script that does so (a user script calling RULE().init(), a tmlauncher command).
STARTS_MPI_TEXT = ("tmlauncher", "mpiexec", "rule.init(", "from theanompi.launch.cli import main")


def _code_starts_mpi(code: types.CodeType, namespace: dict, seen: set) -> bool:
    """Whether ``code``, its nested functions, or the module-level functions it names use STARTS_MPI_*."""
    if code in seen:
        return False
    seen.add(code)
    if STARTS_MPI_NAMES.intersection(code.co_names):
        return True
    for const in code.co_consts:
        if isinstance(const, str) and any(text in const for text in STARTS_MPI_TEXT):
            return True
        if isinstance(const, types.CodeType) and _code_starts_mpi(const, namespace, seen):
            return True
    return any(_function_starts_mpi(namespace.get(name), seen) for name in code.co_names)


def _function_starts_mpi(func: object, seen: set) -> bool:
    """Whether a test, fixture or helper function defined under tests/ starts MPI processes (see _code_starts_mpi)."""
    func = getattr(func, "__wrapped__", func)
    if not isinstance(func, types.FunctionType) or not func.__code__.co_filename.startswith(str(ROOT / "tests")):
        return False
    return _code_starts_mpi(func.__code__, func.__globals__, seen)


def starts_mpi(test: Callable, fixtures: list[Callable]) -> bool:
    """Whether a test (or one of its fixtures) starts mpiexec, the launcher, or a rule's session.

    >>> def unit():
    ...     return 1 + 1
    >>> def session():
    ...     return run_launcher("-cfg=x.cfg")
    >>> starts_mpi(unit, []), starts_mpi(session, []), starts_mpi(unit, [session])
    (False, True, True)
    """
    seen: set = set()
    return any(_function_starts_mpi(func, seen) for func in [test, *fixtures])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mpi: starts mpiexec, tmlauncher or a rule's session (make test-fast skips it)")
    config.addinivalue_line("markers", "slow: one process, but trains a model or runs Python subprocesses for "
                                       "seconds (make test-fast skips it)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        test = getattr(item, "function", None)
        if test is None:
            continue
        definitions = getattr(item, "_fixtureinfo", None)
        fixtures = [d.func for defs in (definitions.name2fixturedefs.values() if definitions else ()) for d in defs]
        if starts_mpi(test, fixtures):
            item.add_marker(pytest.mark.mpi)
