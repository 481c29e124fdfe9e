"""The mpiexec command line the launcher builds (an app context per rank, threads, binding, hosts, the spec shipped
to ranks on other hosts) and what a terminated launcher says. No MPI job starts here; conftest's `mpi` mark, which
goes by the text "mpiexec" in a test, still lands on three of these tests."""

import pytest

from theanompi.core.devices import parse_devices
from theanompi.launch.dry_run import app_contexts, rank_environment
from theanompi.launch.mpiexec import mpiexec_command
from theanompi.runtime.epoch_progress import BAR_ENV
from theanompi.session.spec import RankSpec


def ranks(spec):
    return [RankSpec(d, "worker") for d in parse_devices(spec)]


def test_one_app_context_per_rank_with_thread_counts():
    argv = mpiexec_command(ranks("cpu0,cpu1"), "/r/session.json", "none", mpiexec="mpiexec", python="py", cpu_count=4)
    contexts = " ".join(argv).split(" : ")
    assert len(contexts) == 2
    assert "-x OMP_NUM_THREADS=2" in contexts[1] and "-x OPENBLAS_NUM_THREADS=2" in contexts[1]
    assert contexts[1].endswith("py -m theanompi.rules.rank_main /r/session.json")
    assert "--oversubscribe" not in argv


@pytest.mark.parametrize("bind", ["core", "none"])
def test_oversubscribe_when_ranks_exceed_cores_and_say_so(bind, caplog):
    with caplog.at_level("WARNING", logger="theanompi"):
        argv = mpiexec_command(ranks("cpu0,cpu1,cpu2"), "s", bind, mpiexec="m", python="p", cpu_count=2)
    assert "--oversubscribe" in argv
    assert argv[1:3] == ["--bind-to", "none"]  # Open MPI 5 cannot bind an oversubscribed MPMD job
    assert "-x OMP_NUM_THREADS=1" in " ".join(argv)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("3 ranks on this host's 2 cores: they take turns on the cores")
    assert ("BIND=core ignored" in said) == (bind == "core")


def test_remote_hosts_and_gpu_pinning():
    argv = mpiexec_command(ranks("n1:cuda0,cuda1;n2:cuda0"), "s", "none", mpiexec="m", python="p", cpu_count=8)
    contexts = " ".join(argv).split(" : ")
    assert "--host n1" in contexts[0] and "CUDA_VISIBLE_DEVICES=0" in contexts[0]
    assert "--host n1" in contexts[1] and "CUDA_VISIBLE_DEVICES=1" in contexts[1]
    assert "--host n2" in contexts[2] and "CUDA_VISIBLE_DEVICES=0" in contexts[2]


def test_threads_per_worker_override():
    argv = mpiexec_command(ranks("cpu0"), "s", "none", mpiexec="m", python="p", cpu_count=8, threads=1)
    assert "-x OMP_NUM_THREADS=1" in " ".join(argv)


def test_binding_without_oversubscription():
    argv = mpiexec_command(ranks("cpu0,cpu1"), "s", "core", mpiexec="m", python="p", cpu_count=2)
    assert argv[1:3] == ["--bind-to", "core"] and "--oversubscribe" not in argv


def test_a_terminal_asks_for_the_bar_and_output_as_it_comes():
    plain = mpiexec_command(ranks("cpu0,cpu1"), "s", "none", mpiexec="m", python="p", cpu_count=2)
    assert "--output" not in plain and BAR_ENV not in " ".join(plain)
    argv = mpiexec_command(ranks("cpu0,cpu1"), "s", "none", mpiexec="m", python="p", cpu_count=2, progress_columns=120)
    assert argv[argv.index("--output") + 1] == ":raw"  # not line by line: the bar's carriage returns get through
    contexts = app_contexts(argv)
    assert [rank_environment(c, {})[BAR_ENV] for c in contexts] == ["120", "120"]


def test_a_terminated_launcher_says_which_signal_stopped_it(tmp_path):
    """SIGTERM to a launcher waiting on a session stops it, and the message names SIGTERM, not Ctrl-C."""
    import subprocess
    import sys

    script = tmp_path / "term.py"
    script.write_text(
        "import os, signal, threading\nfrom theanompi.launch.mpiexec import MpiexecRun, raise_interrupted\n"
        "signal.signal(signal.SIGTERM, raise_interrupted)\n"
        f"session = MpiexecRun(['sleep', '60'], {str(tmp_path)!r}, [])\n"
        "threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()\n"
        "code = session.wait()\nprint(code, session.failure, session.proc.returncode)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "143 interrupted (SIGTERM); every rank was stopped -15", proc.stderr


def test_a_rank_that_reported_a_failure_fails_the_session_whatever_mpiexec_says(tmp_path):
    """Under ON_WORKER_LOSS=continue (ULFM) mpiexec has exited 0 after EASGD's server was killed and both workers
    aborted: the launcher goes by the ranks' own status, not by that code."""
    from theanompi.launch.mpiexec import RANK_FAILED_CODE, MpiexecRun
    from theanompi.session.rank_status import write_status

    two = ranks("cpu0,cpu1")
    for rank in (0, 1):
        write_status(tmp_path, rank, "pid", str(1000 + rank))
    write_status(tmp_path, 1, "failed", "rank 1 (worker on cpu1): Exception: MPI_ERR_IN_STATUS: error code in status")
    session = MpiexecRun(["true", "--with-ft", "ulfm"], tmp_path, two)  # true(1) stands for an mpiexec that says 0
    assert session.wait() == RANK_FAILED_CODE == 1
    assert session.failure == ("rank 0 (worker on cpu0) died; the others then stopped: rank 1 (worker on cpu1): "
                               "Exception: MPI_ERR_IN_STATUS: error code in status")  # the dead one named first
    clean = tmp_path / "clean"
    clean.mkdir()
    write_status(clean, 0, "pid", "1000")
    write_status(clean, 0, "done", "ok")
    assert MpiexecRun(["true"], clean, two[:1]).wait() == 0  # no failure reported: mpiexec's 0 stands


def test_an_mpiexec_that_does_not_exit_after_every_rank_finished_is_ended(tmp_path):
    """Under ON_WORKER_LOSS=continue (ULFM) a rank killed after its ``done`` left the others waiting in Open MPI's
    MPI_Finalize for ever: once every rank is through with its work, mpiexec has ``finalize_grace`` seconds to exit,
    then the launcher ends it and the session counts as finished (its results are on disk)."""
    import os
    import subprocess as sp

    from theanompi.launch.mpiexec import MpiexecRun
    from theanompi.session.rank_status import write_status

    two = ranks("cpu0,cpu1")
    for rank in (0, 1):
        write_status(tmp_path, rank, "pid", str(1000 + rank))
        write_status(tmp_path, rank, "done", "ok")
    session = MpiexecRun(["sleep", "600"], tmp_path, two, finalize_grace=0.5)  # sleep stands for the stuck mpiexec
    assert session.wait() == 0 and session.ended_after_finalize_hung
    assert session.proc.poll() is not None and session.failure is None and session.lost == []

    gone = sp.Popen(["true"])
    gone.wait()  # a rank's process that died without a word (its pid no longer runs)
    for fault_tolerant, rank_1_pid, through in [(True, gone.pid, True), (False, gone.pid, False),
                                                (True, None, False)]:
        run_dir = tmp_path / f"{fault_tolerant}-{rank_1_pid}"
        run_dir.mkdir()
        write_status(run_dir, 0, "pid", "1000")
        write_status(run_dir, 0, "done", "ok")
        if rank_1_pid is not None:
            write_status(run_dir, 1, "pid", str(rank_1_pid))
        argv = ["sleep", "600"] + (["--with-ft", "ulfm"] if fault_tolerant else [])
        running = MpiexecRun(argv, run_dir, two)
        try:  # survivors carry on only under ULFM; a rank not yet started is not through
            assert running._every_rank_through() is through, (fault_tolerant, rank_1_pid)
        finally:
            running.terminate(grace=1.0)
    write_status(tmp_path, 1, "pid", str(os.getpid()))  # a rank still running (this process) is not through
    (tmp_path / "ranks" / "rank-1.done").unlink()
    alive = MpiexecRun(["sleep", "600", "--with-ft", "ulfm"], tmp_path, two)
    try:
        assert not alive._every_rank_through()
    finally:
        alive.terminate(grace=1.0)


def test_a_signal_while_mpiexec_is_being_started_ends_it(tmp_path, monkeypatch):
    """Between the spawn and :meth:`MpiexecRun.wait` (the tree's first look, the stderr pump) a Ctrl-C must not leave
    mpiexec running: it is ended and the interrupt goes on to the caller, which still owns the run directory's claim
    (start_session releases it on any exception)."""
    import os

    from theanompi.launch import mpiexec

    class Claim:
        released = False

        def release(self):
            self.released = True

    started = []

    def interrupted_observe(tree):  # the first look is interrupted; terminate()'s own looks are not
        started.append(tree.root)
        if len(started) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(mpiexec.ProcessTree, "observe", interrupted_observe)
    monkeypatch.setattr(mpiexec.ProcessTree, "end", lambda tree, grace: [])
    claim = Claim()
    with pytest.raises(KeyboardInterrupt):
        mpiexec.MpiexecRun(["sleep", "600"], tmp_path, [], claim=claim)
    pid = started[0]
    with pytest.raises(ProcessLookupError):  # ended and reaped
        os.kill(pid, 0)
    assert not claim.released  # the caller's to let go


def test_launch_plan_places_every_rank_and_ships_the_spec_only_to_other_hosts(tmp_path, monkeypatch):
    import socket

    from theanompi.core.devices import parse_devices
    from theanompi.launch.mpiexec import mpiexec_command
    from theanompi.session.remote import REMOTE_SPEC_ENV, decode_spec
    from theanompi.session.spec import RankSpec

    spec_path = tmp_path / "session.json"
    spec_path.write_text('{"rule": "BSP"}')
    here = socket.gethostname()
    ranks = [RankSpec(d, "worker") for d in parse_devices(f"{here}:cpu0,cpu1;node2:cpu0,cpu1")]
    argv = mpiexec_command(ranks, str(spec_path), bind="none", mpiexec="mpiexec", python="python", cpu_count=2)
    contexts = " ".join(argv).split(" : ")
    assert [c.split("--host ")[1].split()[0] for c in contexts] == [f"{here}:2", f"{here}:2", "node2:2", "node2:2"]
    shipped = [a.split("=", 1)[1] for a in argv if a.startswith(REMOTE_SPEC_ENV + "=")]
    assert len(shipped) == 2 and decode_spec(shipped[0]) == '{"rule": "BSP"}'
    one_host = mpiexec_command([RankSpec(d, "worker") for d in parse_devices("cpu0,cpu1")], str(spec_path),
                               bind="none", mpiexec="mpiexec", python="python", cpu_count=2)
    assert "--host" not in one_host and not any(REMOTE_SPEC_ENV in a for a in one_host)
