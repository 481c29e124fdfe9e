"""Faults under a real mpiexec: a worker killed with SIGKILL ends the session quickly, naming it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ASSETS, write_cfg

pytestmark = pytest.mark.usefixtures("ends_its_processes")  # kills what a launch that timed out leaves
EASGD_DEVICES = "cpu0,cpu1,cpu2"  # EASGD's first device is its server's: a server and two workers
RULES = {"BSP": {}, "EASGD": {"EASGD_TAU": 1, "DEVICES": EASGD_DEVICES}, "GOSGD": {"GOSGD_P": 0.5}, "ASGD": {}}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_killed_worker_ends_session_naming_rank_without_orphans(tmp_path, rule):
    cfg = write_cfg(tmp_path / "s.cfg", RULE=rule, MODELFILE=str(ASSETS / "contract_models.py"),
                    MODELCLASS="Sleeper", N_EPOCHS=50, RUN_DIR="run", **RULES[rule])
    exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
    proc = subprocess.Popen([exe, f"-cfg={cfg}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    pid_file = tmp_path / "run" / "ranks" / "rank-1.pid"
    deadline = time.time() + 120
    while time.time() < deadline and not pid_file.exists():
        time.sleep(0.2)
    time.sleep(3)  # let it train a little
    assert proc.poll() is None, proc.communicate()
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    killed = time.time()
    _, err = proc.communicate(timeout=60)
    assert time.time() - killed < 30
    assert proc.returncode != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("tmlauncher: session failed: rank 1 (worker on cpu"), last
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", str(tmp_path / "run")], capture_output=True, text=True).stdout
    assert left.strip() == "", f"orphans: {left}"


# BSP cdd's case (the gradient's 'b1' on worker 1) is in the bad-input matrix
@pytest.mark.parametrize("rule, keys, bad_param", [
    ("BSP", {"BSP_SYNC_TYPE": "avg"}, "'W1' (params[2]) on worker 1"),
    ("EASGD", {"EASGD_TAU": 1, "DEVICES": EASGD_DEVICES}, "'W1' (params[2]) on worker 1"),
    ("GOSGD", {"GOSGD_P": 1.0}, "'W1' (params[2]) on worker 1"),
    ("ASGD", {}, "'W1' (params[2]) on worker 1"),
])
def test_nan_in_exchanged_buffer_stops_session_naming_rank_and_parameter(tmp_path, rule, keys, bad_param):
    from conftest import run_launcher

    cfg = write_cfg(tmp_path / "s.cfg", RULE=rule, MODELFILE=str(ASSETS / "contract_models.py"),
                    MODELCLASS="NaNInjector", N_EPOCHS=3, **keys)
    proc, seconds = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "NonFiniteError: NaN or Inf in the" in last and bad_param in last, last
    assert seconds < 60


def test_check_finite_can_be_turned_off(tmp_path):
    from conftest import run_launcher

    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=str(ASSETS / "contract_models.py"), MODELCLASS="NaNInjector",
                    N_EPOCHS=2, CHECK_FINITE="false", BSP_SYNC_TYPE="avg")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr  # trains on (into NaN) as the user asked


# every rule, every phase a rank can hang in: the stuck rank is named as stuck, the ranks waiting on it as waiting
@pytest.mark.parametrize("rule, hang_in, hang_rank, keys, culprit", [
    ("BSP", "train", 1, {}, "rank 1 (worker on cpu1) is stuck in training (computing)"),
    ("ASGD", "train", 1, {}, "rank 1 (worker on cpu1) is stuck in training (computing)"),
    ("EASGD", "train", 1, {"EASGD_TAU": 1, "DEVICES": EASGD_DEVICES},
     "rank 2 (worker on cpu2) is stuck in training (computing)"),
    ("GOSGD", "val", 1, {"GOSGD_P": 0.5}, "rank 1 (worker on cpu1) is stuck in validation"),
    ("EASGD", "val", 0, {"EASGD_TAU": 1, "DEVICES": EASGD_DEVICES}, "rank 0 (server on cpu0) is stuck in validation"),
    ("BSP", "build", 1, {"WATCHDOG_BUILD": 10},
     "rank 1 (worker on cpu1) is stuck in building the model (constructing)"),
])
def test_watchdog_names_the_stuck_rank_in_every_phase(tmp_path, rule, hang_in, hang_rank, keys, culprit):
    from conftest import run_launcher

    cfg = write_cfg(tmp_path / "s.cfg", RULE=rule, MODELFILE=str(ASSETS / "contract_models.py"),
                    MODELCLASS="HangsWhere", MODEL_HANG_IN=hang_in, MODEL_HANG_RANK=hang_rank, N_EPOCHS=2,
                    WATCHDOG=8, **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=240)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tmlauncher: session failed: stalled: {culprit} for "), last
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert left.strip() == ""


@pytest.mark.parametrize("rule, worker_rank", [("EASGD", 2), ("ASGD", 1)])
def test_survivors_carry_on_without_a_lost_worker(tmp_path, rule, worker_rank):
    """ON_WORKER_LOSS=continue (ULFM): worker 1 (rank ``worker_rank``) is killed mid-run (SIGKILL at its 6th step),
    the session still ends well. The model kills it: a kill from outside, timed by the worker's first records, came
    on a loaded machine after the worker had finished its steps (and Open MPI's finalize then hung: the launcher's
    test_an_mpiexec_that_does_not_exit_after_every_rank_finished_is_ended)."""
    from conftest import run_launcher

    cfg = write_cfg(tmp_path / "s.cfg", RULE=rule, MODELFILE=str(ASSETS / "contract_models.py"),
                    MODELCLASS="DiesMidRun", MODEL_DIE_RANK=1, N_EPOCHS=2, RUN_DIR="run",
                    ON_WORKER_LOSS="continue", EASGD_TAU=1 if rule == "EASGD" else None,
                    DEVICES=EASGD_DEVICES if rule == "EASGD" else "cpu0,cpu1")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert f"carried on without rank {worker_rank} (worker on cpu{worker_rank})" in proc.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["lost_workers"] == [1]
    assert summary["epochs"] == 2 and summary["final_val_accuracy"] >= 0.85, summary
    if rule == "EASGD":  # the lost worker's unreported steps were done by the other one
        assert summary["iterations"] == 2 * summary["global_epoch_iterations"]
        assert sum(w["iterations"] for w in summary["per_worker"]) == summary["iterations"]


def test_lost_server_is_named_not_the_workers_that_saw_it_go(tmp_path):
    """ON_WORKER_LOSS=continue cannot carry on without EASGD's server: the dead server is blamed."""
    # far more epochs than the test waits for: the server must still be serving when it is killed, however slow
    # the machine (a worker's first records are written at its first epoch's end, which on a loaded machine came
    # as late as the last epoch of a two-epoch session: the server had finished before the kill)
    cfg = write_cfg(tmp_path / "s.cfg", RULE="EASGD", MODELFILE=str(ASSETS / "contract_models.py"),
                    MODELCLASS="Napper", N_EPOCHS=50, RUN_DIR="run", ON_WORKER_LOSS="continue", EASGD_TAU=1,
                    DEVICES=EASGD_DEVICES)
    exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
    proc = subprocess.Popen([exe, f"-cfg={cfg}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    records = tmp_path / "run" / "workers" / "worker-1" / "iterations.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and not (records.exists() and records.stat().st_size):
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    os.kill(int((tmp_path / "run" / "ranks" / "rank-0.pid").read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    last = err.strip().splitlines()[-1]
    # the server is named first among the dead; a worker that mpiexec killed while the session ended (before
    # it could leave a status file) may be listed after it ("rank 0 (server on cpu0), rank 2 (...) died")
    assert last.startswith("tmlauncher: session failed: rank 0 (server on cpu0)"), last
    assert " died; the others then stopped: " in last, last


def _launch_with_private_mount(tmp_path, mount_opts: str, cfg, env=None) -> subprocess.CompletedProcess:
    """tmlauncher with a small tmpfs (``mount_opts``) on ``tmp_path/mnt``, in a private mount namespace."""
    import shutil

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
    script = f'mount -t tmpfs -o {mount_opts} tmpfs "{mnt}" || exit 99; exec "{exe}" -cfg="{cfg}"'
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, stdin=subprocess.DEVNULL, env=env)
    if proc.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    return proc


# a place the session cannot write: refused at launch (one line, exit 2) or named when found (disk full)
@pytest.mark.parametrize("case, mount_opts, keys, code, fragment", [
    ("read-only RUN_DIR", "ro,size=1m", {"RUN_DIR": "mnt/run"}, 2,
     "tmlauncher: error: RUN_DIR='{mnt}/run' is not writable: Read-only file system"),
    ("read-only CHECKPOINT_DIR", "ro,size=1m", {"RUN_DIR": "run", "CHECKPOINT_DIR": "mnt/ck", "CHECKPOINT_EVERY": 1},
     2, "tmlauncher: error: CHECKPOINT_DIR='{mnt}/ck' is not writable: Read-only file system"),
    ("disk full", "size=96k", {"RUN_DIR": "mnt/run", "MODEL_HIDDEN": 2048, "N_EPOCHS": 1}, 1,
     "No space left on device"),
    ("full CHECKPOINT_DIR", "size=96k", {"RUN_DIR": "run", "CHECKPOINT_DIR": "mnt/ck", "CHECKPOINT_EVERY": 1,
                                         "MODEL_HIDDEN": 2048, "N_EPOCHS": 1}, 1,
     "No space left on device: '{mnt}/ck/ckpt-epoch-0000.hkl'"),
])
def test_unwritable_places_are_named(tmp_path, case, mount_opts, keys, code, fragment):
    cfg = write_cfg(tmp_path / "s.cfg", **keys)
    proc = _launch_with_private_mount(tmp_path, mount_opts, cfg)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert fragment.format(mnt=tmp_path / "mnt") in lines[-1], proc.stderr
    if code == 2:
        assert len(lines) == 1, proc.stderr
    else:
        assert lines[-1].startswith("tmlauncher: session failed: rank 0 (worker on cpu0): OSError: "), lines[-1]
        assert "the disk is full" in lines[-1]


def _epochs_recorded(run_dir) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run_dir / "epochs.jsonl").read_text().splitlines()]


def test_reused_run_dir_starts_clean_and_busy_directories_are_refused(tmp_path):
    """Old status files neither stop nor get blamed for a new session; an earlier session's records and
    checkpoints are set aside (the new curves and 'latest' are the new session's own), a resumed session appends;
    two sessions never share a RUN_DIR or a CHECKPOINT_DIR."""
    from conftest import run_launcher

    from theanompi.session.run_dir import claim_run_dir

    run = tmp_path / "run"
    status = run / "ranks"
    status.mkdir(parents=True)
    (status / "rank-0.stall").write_text(json.dumps({"who": "rank 0 (worker on cpu0)", "where": "training",
                                                     "waiting": False, "since": time.time() - 376, "iteration": 5}))
    (status / "rank-1.failed").write_text("rank 1 (worker on cpu1): RuntimeError: an old failure\n")
    (run / "epochs.jsonl").write_text("".join(json.dumps({"epoch": e, "val_accuracy": 0.1}) + "\n" for e in range(3)))
    (run / "summary.json").write_text("{}")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt-epoch-0004.hkl").write_bytes(b"another session's model")
    (run / "checkpoints" / "latest").write_text("ckpt-epoch-0004.hkl\n")
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", N_EPOCHS=1, WATCHDOG=30, CHECKPOINT_EVERY=1)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (status / "rank-1.failed").exists()
    assert _epochs_recorded(run) == [0]
    (earlier,) = (run / "previous").iterdir()
    assert sorted(p.name for p in earlier.iterdir()) == ["epochs.jsonl", "summary.json"]
    assert (run / "checkpoints" / "latest").read_text().strip() == "ckpt-epoch-0000.hkl"
    assert sorted(p.name for p in (run / "checkpoints").glob("previous/*/*")) == ["ckpt-epoch-0004.hkl", "latest"]
    assert f"RUN_DIR held the records of an earlier session: moved to {earlier}" in proc.stdout
    resumed = write_cfg(tmp_path / "r.cfg", RUN_DIR="run", N_EPOCHS=2, RESUME="run/checkpoints")
    proc, _ = run_launcher(f"-cfg={resumed}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _epochs_recorded(run) == [0, 1] and len(list((run / "previous").iterdir())) == 1

    busy = [("RUN_DIR", run, claim_run_dir(run)),  # as a running launcher holds them
            ("CHECKPOINT_DIR", tmp_path / "ckpts", claim_run_dir(tmp_path / "a", checkpoint_dir=tmp_path / "ckpts"))]
    try:
        for what, path, _ in busy:
            keys = {"RUN_DIR": "run"} if what == "RUN_DIR" else {"RUN_DIR": "b", "CHECKPOINT_DIR": "ckpts"}
            cfg = write_cfg(tmp_path / "busy.cfg", N_EPOCHS=1, CHECKPOINT_EVERY=1, **keys)
            proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
            assert proc.returncode == 2
            assert proc.stderr.strip() == (f"tmlauncher: error: {what}='{path}' is in use by another session "
                                           f"(launcher pid {os.getpid()}); give this session another {what}, or "
                                           "wait for that one to end"), proc.stderr
    finally:
        for _, _, claim in busy:
            claim.release()


def test_rule_init_from_a_finished_thread_runs_on_and_a_second_init_is_refused(tmp_path):
    """The session outlives the thread that started it (a notebook callback, an executor);
    init() on an object whose session was not waited for is refused."""
    script = tmp_path / "api.py"
    script.write_text(
        "import sys, threading\nfrom theanompi import BSP\nrule = BSP()\n"
        "kwargs = dict(devices='cpu0,cpu1', modelfile='theanompi.models.mlp', modelclass='MLP', n_epochs=1)\n"
        "t = threading.Thread(target=lambda: rule.init(run_dir='a', **kwargs)); t.start(); t.join()\n"
        "try:\n    rule.init(run_dir='b', **kwargs)\nexcept RuntimeError as err:\n    print('refused:', err)\n"
        "sys.exit(rule.wait())\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert (f"refused: BSP.init(): this object already runs a session (RUN_DIR='{tmp_path / 'a'}'); wait() for it "
            "first, or use another BSP()") in proc.stdout
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["epochs"] == 1
    assert not (tmp_path / "b").exists()


def _plant_a_compiler(cache, markers):
    """A cache directory anyone may write, holding the pytensorrc theanompi would use there -- with a compiler
    that leaves a marker (pytensor runs it as soon as it looks up its -march flags)."""
    import hashlib

    from theanompi.backend.pytensor_config import pytensorrc_text

    cache.mkdir()
    compiler = markers / "evil-g++"
    compiler.write_text(f"#!/bin/sh\ntouch {markers / 'compiler-ran'}\nexec g++ \"$@\"\n")
    compiler.chmod(0o755)
    text = pytensorrc_text(cache)
    rc = cache / f"pytensorrc-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    rc.write_text(text.replace("[global]\n", f"[global]\ncxx = {compiler}\n"))
    cache.chmod(0o777)


# a cache the session must not use: one line (from the launcher only: its ranks inherit the decision), and the
# session runs with the caches off (FAST_COMPILE: nothing to compile wherever the compile cache is)
@pytest.mark.parametrize("case", ["read-only", "writable by others, with a planted compiler"])
def test_a_cache_that_cannot_be_used_costs_one_line_and_the_session_runs(tmp_path, case):
    markers = tmp_path / "markers"
    markers.mkdir()
    cfg = write_cfg(tmp_path / "s.cfg", RUN_DIR="run", N_EPOCHS=1)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTENSORRC", "THEANOMPI_FUNCTION_CACHE")}
    env["PYTENSOR_FLAGS"] = "mode=FAST_COMPILE"
    if case == "read-only":
        env["THEANOMPI_CACHE_DIR"] = str(tmp_path / "mnt" / "cache")
        proc = _launch_with_private_mount(tmp_path, "ro,size=1m", cfg, env=env)
        reason = "cannot be created: Read-only file system"
    else:
        _plant_a_compiler(tmp_path / "cache", markers)
        env["THEANOMPI_CACHE_DIR"] = str(tmp_path / "cache")
        exe = os.path.join(os.path.dirname(sys.executable), "tmlauncher")
        proc = subprocess.run([exe, f"-cfg={cfg}"], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                              stdin=subprocess.DEVNULL, env=env)
        reason = "is writable by group and others (mode 0777)"
    assert proc.returncode == 0, proc.stderr
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "is not used" in line]
    assert len(said) == 1 and reason in said[0] and "compiling with the caches off" in said[0], said
    assert "Traceback" not in proc.stderr
    assert [p.name for p in markers.iterdir()] == ([] if case == "read-only" else ["evil-g++"])
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs"] == 1
