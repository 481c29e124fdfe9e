"""The GPU kit (tools/gpu/) without a GPU: its record of a run from junit XML and benchmark JSON, its arguments.
(The kit itself runs on the GPU host: docs/gpu.md#running-the-gpu-checks-on-the-offline-gpu-host.)"""

import json
import os
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools" / "gpu"))
import gpu_run_record as record

KIT = ROOT / "tools" / "gpu"


def _pytest_junit(tmp_path, name, body):
    """A junit XML written by a real pytest run of ``body`` (a test module's text)."""
    module = tmp_path / f"test_{name}.py"
    module.write_text(body)
    xml = tmp_path / "out" / f"junit-{name}.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                    str(module)], cwd=tmp_path, capture_output=True, timeout=120)
    return xml


def test_write_counts_the_junit_reports_and_takes_the_benchmarks(tmp_path):
    (tmp_path / "out").mkdir()
    _pytest_junit(tmp_path, "gpu", "import pytest\n"
                  "def test_a(): pass\n"
                  "def test_b(): assert False\n"
                  "@pytest.mark.skip(reason='NCCL across GPUs needs 2 GPUs')\n"
                  "def test_c(): pass\n")
    _pytest_junit(tmp_path, "cpu", "def test_d(): pass\n")
    resnet = {"batch": 128, "resnet_step_ratio_vs_pure_jax": {"20": 1.05},
              "depths": {"20": {"samples_per_s": {"ours": 9000.0, "pure": 9500.0, "torch": 12000.0},
                                "epoch_50k_s": {"ours": 5.6, "pure": 5.3, "torch": 4.2}}}}
    (tmp_path / "out" / "resnet_jax_step.json").write_text(json.dumps(resnet))
    (tmp_path / "out" / "device_exchange_1rank.json").write_text(json.dumps({"ranks": 1}))
    rec = record.write(tmp_path / "out", device="NVIDIA H100 80GB HBM3")
    assert json.loads((tmp_path / "out" / "gpu_run.json").read_text()) == rec
    assert (rec["device"], rec["tests_passed"], rec["tests_failed"], rec["tests_skipped"]) == (
        "NVIDIA H100 80GB HBM3", 2, 1, 1)
    assert rec["skip_reasons"] == ["test_c: NCCL across GPUs needs 2 GPUs"]
    assert rec["resnet_step_ratio_vs_pure_jax"] == {"20": 1.05}
    assert rec["resnet_samples_per_s"]["resnet20"]["torch"] == 12000.0
    assert rec["device_exchange"] == {"device_exchange_1rank": {"ranks": 1}}
    assert any("NCCL across GPUs" in note for note in rec["notes"]) and rec["date"]


def test_merge_adds_the_parts_of_a_run(tmp_path):
    tests = {"device": "H100", "date": "2026-11-01T10:00:00+00:00", "tests_passed": 20, "tests_failed": 1,
             "tests_errors": 0, "tests_skipped": 6, "skip_reasons": ["x: 2 GPUs"], "notes": ["one GPU"]}
    bench = {"device": "H100", "date": "2026-11-01T10:12:00+00:00", "resnet_step_ratio_vs_pure_jax": {"32": 1.02},
             "notes": ["one GPU"]}
    paths = []
    for name, rec in (("a", tests), ("b", bench)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(rec))
    out = tmp_path / "gpu_run.json"
    assert record.main(["merge", *map(str, paths), "--to", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged["tests_passed"] == 20 and merged["resnet_step_ratio_vs_pure_jax"] == {"32": 1.02}
    assert merged["date"] == bench["date"] and merged["notes"] == ["one GPU"]
    assert record.main(["merge", str(tmp_path / "missing.json")]) == 2


def test_run_on_gpu_refuses_an_unknown_part_and_parses():
    assert subprocess.run(["bash", "-n", str(KIT / "run_on_gpu.sh")]).returncode == 0
    assert subprocess.run(["bash", "-n", str(KIT / "fetch_wheels.sh")]).returncode == 0
    proc = subprocess.run(["bash", str(KIT / "run_on_gpu.sh"), "everything"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_docstring_examples_of_the_record_and_the_table_script():
    import doctest

    sys.path.insert(0, str(ROOT))
    from benchmarks import theanompi_table

    for module in (record, theanompi_table):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_write_takes_the_steps_and_theano_mpi_table(tmp_path):
    cell = {"ours_train_s": 4.0, "ours_comm_s": 0.0, "pytorch_s": 5.0, "ratio": 0.8}
    (tmp_path / "theanompi_table_gpu.json").write_text(json.dumps(
        {"device": "NVIDIA H200", "compute": "jax", "steps_timed_per_worker": 10,
         "rows": {"alexnet128": {"1": cell}}}))
    (tmp_path / "steps.tsv").write_text("tests\t0\t200\nresnet\tcut\t225\ntable\tnot run\t0\n")
    rec = record.write(tmp_path, device="NVIDIA H200")
    assert rec["theanompi_table"]["rows"] == {"alexnet128": {"1": {"ours_s": 4.0, "pytorch_s": 5.0, "ratio": 0.8}}}
    assert rec["steps"] == {"tests": {"status": 0, "seconds": 200}, "resnet": {"status": "cut", "seconds": 225},
                            "table": {"status": "not run", "seconds": 0}}


def test_a_failed_setup_stops_the_run_and_leaves_its_log(tmp_path):
    """No wheels: the kit says so in one line, exits 1 at once, and $OUT holds the log and the raw results."""
    (tmp_path / "wheels").mkdir()
    env = {**os.environ, "OUT": str(tmp_path / "out"), "TMPI_GPU_RAW": str(tmp_path / "raw"),
           "TMPI_WHEELS": str(tmp_path / "wheels"), "TMPI_VENV": str(tmp_path / "venv")}
    proc = subprocess.run(["bash", str(KIT / "run_on_gpu.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert f"setup: no wheels in {tmp_path / 'wheels'}/" in proc.stdout and "setup failed" in proc.stdout
    assert "setup: no wheels" in (tmp_path / "out" / "run.log").read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["raw.tar.gz", "run.log"]


def test_the_table_script_refuses_bad_arguments_in_one_line():
    script = str(ROOT / "benchmarks" / "theanompi_table.py")
    for args, message in ((["--workers", "two"], "--workers: 'two' is not a comma-separated list"),
                          (["--models", "lenet"], "--models: 'lenet' is not one of alexnet128"),
                          (["--device", "cuda", "--compute", "c"], "--compute c runs on the CPU"),
                          (["--steps", "0"], "--workers and --steps must be at least 1")):
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, args
