"""The record of a GPU run: ``gpu_run.json`` from the kit's junit XML and benchmark JSON.

    python tools/gpu/gpu_run_record.py write OUT_DIR [--device NAME]
    python tools/gpu/gpu_run_record.py merge RUN_JSON... [--to benchmarks/results/gpu_run.json]

``write`` (run by ``tools/gpu/run_on_gpu.sh`` after each step) reads what the run has left in ``OUT_DIR``
-- ``junit-*.xml`` of the test runs, ``resnet_jax_step.json``, ``device_exchange*.json``, ``jax_step.json``,
``theanompi_table_gpu.json``, ``steps.tsv`` -- and writes ``OUT_DIR/gpu_run.json``: ``device`` (the GPU's name
as the driver reports it), ``date``, ``tests_passed``/``tests_failed``/``tests_errors``/``tests_skipped`` (and
each skip's reason), the ResNet step figures (``resnet_step_ratio_vs_pure_jax``, samples/s of ours, pure JAX
and PyTorch, the 50,000-image epoch), the exchange figures, Theano-MPI's table on the GPU, each step's outcome
(exit status, ``cut`` at its time limit, or ``not run``; seconds) and the notes that say what one GPU cannot
show.
``merge`` adds the records of several parts (each device command returns its own) into one file.

Example
-------
>>> counts = junit_counts('<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
...                       '<testcase name="a"/><testcase name="b"><failure/></testcase>'
...                       '<testcase name="c"><skipped message="needs 2 GPUs"/></testcase>'
...                       '</testsuite></testsuites>')
>>> counts["tests_passed"], counts["tests_failed"], counts["tests_skipped"], counts["skip_reasons"]
(1, 1, 1, ['c: needs 2 GPUs'])
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECORD = ROOT / "benchmarks" / "results" / "gpu_run.json"
COUNTS = ("tests_passed", "tests_failed", "tests_errors", "tests_skipped")
ONE_GPU_NOTE = ("This host has one GPU: NCCL across GPUs (nccl32/nccl16 between ranks, BSP on two GPUs) cannot run "
                "here; those tests skip saying so, and the exchange figures are NCCL's one-rank path and the "
                "host-staged cudampi of two ranks sharing the GPU.")


def junit_counts(xml_text: str) -> dict:
    """Passed/failed/errors/skipped of a junit XML report, with each skipped test's reason."""
    root = ET.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {name: 0 for name in COUNTS}
    reasons = []
    for suite in suites:
        tests, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        total["tests_failed"] += failures
        total["tests_errors"] += errors
        total["tests_skipped"] += skipped
        total["tests_passed"] += tests - failures - errors - skipped
        for case in suite.iter("testcase"):
            skip = case.find("skipped")
            if skip is not None:
                reasons.append(f"{case.get('name')}: {skip.get('message', '')}")
    return {**total, "skip_reasons": reasons}


def gpu_name() -> str | None:
    """The GPU's name as the driver reports it (``nvidia-smi``), None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return ", ".join(names) if out.returncode == 0 and names else None


def _load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def resnet_figures(resnet: dict | None) -> dict:
    if not resnet:
        return {}
    depths = resnet["depths"]
    return {
        "resnet_step_ratio_vs_pure_jax": resnet["resnet_step_ratio_vs_pure_jax"],
        "resnet_samples_per_s": {f"resnet{d}": r["samples_per_s"] for d, r in depths.items()},
        "resnet_epoch_50k_s": {f"resnet{d}": r["epoch_50k_s"] for d, r in depths.items()},
        "resnet_batch": resnet["batch"],
    }


def table_figures(table: dict) -> dict:
    """Theano-MPI's table from ``benchmarks/theanompi_table.py``'s JSON: seconds per 5,120 images, ours and PyTorch.

    >>> cell = {"ours_train_s": 3.0, "ours_comm_s": 0.0, "pytorch_s": 2.5, "ratio": 1.2}
    >>> table_figures({"device": "H100", "compute": "jax", "steps_timed_per_worker": 10,
    ...                "rows": {"alexnet128": {"1": cell}}})["rows"]
    {'alexnet128': {'1': {'ours_s': 3.0, 'pytorch_s': 2.5, 'ratio': 1.2}}}
    """
    rows = {key: {workers: {"ours_s": cell["ours_train_s"] + cell["ours_comm_s"], "pytorch_s": cell["pytorch_s"],
                            "ratio": cell["ratio"]} for workers, cell in row.items()}
            for key, row in table["rows"].items()}
    return {"images": 5120, "device": table["device"], "compute": table["compute"],
            "steps_timed_per_worker": table["steps_timed_per_worker"], "rows": rows}


def step_outcomes(tsv: str) -> dict:
    r"""Each step of the kit's run: its exit status (``cut`` at its time limit, ``not run``) and its seconds.

    >>> step_outcomes("tests\t0\t212\nresnet\tcut\t225\ntable\tnot run\t0\n")["resnet"]
    {'status': 'cut', 'seconds': 225}
    """
    outcomes = {}
    for line in tsv.splitlines():
        name, status, seconds = line.split("\t")
        outcomes[name] = {"status": int(status) if status.isdigit() else status, "seconds": int(seconds)}
    return outcomes


def write(out_dir: Path, device: str | None) -> dict:
    """``out_dir/gpu_run.json`` from the reports in ``out_dir``; returns the record."""
    record: dict = {"device": device or gpu_name() or "no GPU",
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    suites = {path.stem: junit_counts(path.read_text()) for path in sorted(out_dir.glob("junit-*.xml"))}
    if suites:
        for name in COUNTS:
            record[name] = sum(s[name] for s in suites.values())
        record["skip_reasons"] = [r for s in suites.values() for r in s["skip_reasons"]]
        record["test_runs"] = {name: {k: s[k] for k in COUNTS} for name, s in suites.items()}
    record.update(resnet_figures(_load(out_dir / "resnet_jax_step.json")))
    exchange = {path.stem: _load(path) for path in sorted(out_dir.glob("device_exchange*.json"))}
    if exchange:
        record["device_exchange"] = exchange
    jax_step = _load(out_dir / "jax_step.json")
    if jax_step:
        record["jax_step_vs_pure_jax"] = jax_step
    table = _load(out_dir / "theanompi_table_gpu.json")
    if table:
        record["theanompi_table"] = table_figures(table)
    steps = out_dir / "steps.tsv"
    if steps.is_file():
        record["steps"] = step_outcomes(steps.read_text())
    record["notes"] = [ONE_GPU_NOTE]
    (out_dir / "gpu_run.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def merge(records: list[dict]) -> dict:
    """One record from the records of several parts of a run (test counts added, the rest united)."""
    merged: dict = {}
    for record in records:
        for key, value in record.items():
            if key in COUNTS:
                merged[key] = merged.get(key, 0) + value
            elif key in ("skip_reasons", "notes"):
                merged[key] = merged.get(key, []) + [v for v in value if v not in merged.get(key, [])]
            elif isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            elif key == "date":
                merged[key] = max(merged.get(key, value), value)
            else:
                merged[key] = value
    return merged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="OUT_DIR/gpu_run.json from the reports of one part")
    w.add_argument("out_dir", type=Path)
    w.add_argument("--device", help="the GPU's name (default: nvidia-smi's)")
    m = sub.add_parser("merge", help="one record from several parts' gpu_run.json")
    m.add_argument("records", type=Path, nargs="+")
    m.add_argument("--to", type=Path, default=DEFAULT_RECORD)
    args = parser.parse_args(argv)
    if args.command == "write":
        record = write(args.out_dir, args.device)
        print(f"wrote {args.out_dir / 'gpu_run.json'}: device {record['device']!r}, "
              f"{record.get('tests_passed', '-')} passed, {record.get('tests_failed', '-')} failed")
        return 0
    missing = [str(p) for p in args.records if not p.is_file()]
    if missing:
        print(f"gpu_run_record: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    merged = merge([json.loads(p.read_text()) for p in args.records])
    args.to.parent.mkdir(parents=True, exist_ok=True)
    args.to.write_text(json.dumps(merged, indent=2) + "\n")
    print(f"wrote {args.to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
