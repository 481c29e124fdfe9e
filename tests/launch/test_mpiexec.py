
from theanompi.core.devices import parse_devices
from theanompi.launch.mpiexec import mpiexec_command
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


def test_oversubscribe_when_ranks_exceed_cores_and_binding():
    argv = mpiexec_command(ranks("cpu0,cpu1,cpu2"), "s", "core", mpiexec="m", python="p", cpu_count=2)
    assert "--oversubscribe" in argv
    assert argv[1:3] == ["--bind-to", "none"]  # Open MPI 5 cannot bind an oversubscribed MPMD job
    assert "-x OMP_NUM_THREADS=1" in " ".join(argv)


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


def test_the_progress_line_counts_days():
    from theanompi.runtime.records import format_duration

    assert format_duration(3 * 86400 + 3600 + 61) == "3 d 01:01:01"
    assert format_duration(1e12) == "11574074 d 01:46:40"  # no wrap at 24 h, no overflow
