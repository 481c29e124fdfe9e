#!/usr/bin/env python3
"""Run Lasagne's own test suite against ``theanompi.lasagne``, as a porting user would.

Usage::

    PYTHONPATH=$PWD python tools/run_lasagne_suite.py LASAGNE_CHECKOUT [PYTEST_ARGS...]

``LASAGNE_CHECKOUT`` is a clone of Lasagne's repository (the figure in
docs/lasagne.md is for commit 5d3c63c). The script copies its ``lasagne/tests``
into a temporary directory, changes every word ``theano`` to ``pytensor`` there
(``sed -E 's/\\btheano\\b/pytensor/g'``, nothing else), adds a root
``conftest.py`` that calls :func:`theanompi.lasagne_alias.install` (so
``import lasagne`` gives ``theanompi.lasagne``), runs pytest in that directory
and prints the counts and the pass rate ``passed / (passed + failed + errors)``.
Nothing is written into this repository; the temporary directory is removed.
Further arguments go to pytest, with test paths relative to Lasagne's
``lasagne/tests`` (e.g. ``layers/test_conv.py`` or ``-k GRU``). Lasagne's tests
import ``mock`` (the ``[test]`` extra installs it).

Exit status: 0 when pytest ran (whatever the figure), 2 for a bad checkout path.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WORD_THEANO = re.compile(r"\btheano\b")
ROOT_CONFTEST = "import theanompi.lasagne_alias\n\ntheanompi.lasagne_alias.install()\n"


def copy_ported_tests(checkout: Path, destination: Path) -> Path:
    """Lasagne's ``lasagne/tests`` copied under ``destination`` with ``theano`` -> ``pytensor``; returns the copy."""
    source = checkout / "lasagne" / "tests"
    if not source.is_dir():
        raise SystemExit(f"run_lasagne_suite: {checkout} is not a Lasagne checkout (no lasagne/tests directory)")
    tests = destination / "tests"
    shutil.copytree(source, tests, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in tests.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(WORD_THEANO.sub("pytensor", text), encoding="utf-8")
    (destination / "conftest.py").write_text(ROOT_CONFTEST, encoding="utf-8")
    return tests


def count_results(junit_xml: Path) -> dict[str, int]:
    """passed / failed / errors / skipped from pytest's JUnit XML report."""
    root = ET.parse(junit_xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        counts["tests"] += int(suite.get("tests", 0))
        counts["failed"] += int(suite.get("failures", 0))
        counts["errors"] += int(suite.get("errors", 0))
        counts["skipped"] += int(suite.get("skipped", 0))
    counts["passed"] = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts


def summary_line(counts: dict[str, int]) -> str:
    """The figure: counts and ``passed / (passed + failed + errors)``.

    Example
    -------
    >>> summary_line({"tests": 10, "passed": 7, "failed": 1, "errors": 0, "skipped": 2})
    '7 passed, 1 failed, 0 errors, 2 skipped of 10: 87.5 % of the tests that ran passed'
    """
    ran = counts["passed"] + counts["failed"] + counts["errors"]
    rate = 100.0 * counts["passed"] / ran if ran else 0.0
    return (f"{counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
            f"{counts['skipped']} skipped of {counts['tests']}: {rate:.1f} % of the tests that ran passed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a clone of Lasagne's repository")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="more pytest arguments; test paths relative to lasagne/tests")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lasagne-suite-") as tmp:
        tmp_path = Path(tmp)
        copy_ported_tests(args.checkout.resolve(), tmp_path)
        report = tmp_path / "report.xml"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
                   "--continue-on-collection-errors", "--rootdir", tmp, f"--junitxml={report}",
                   "-o", "junit_family=xunit2"]
        paths = [a for a in args.pytest_args
                 if not a.startswith("-") and (tmp_path / "tests" / a.split("::")[0]).exists()]
        others = [a for a in args.pytest_args if a not in paths]
        command += others + ([f"tests/{p}" for p in paths] or ["tests"])
        subprocess.run(command, cwd=tmp, env=env, check=False)
        if not report.exists():
            print("run_lasagne_suite: pytest wrote no report", file=sys.stderr)
            return 1
        print(summary_line(count_results(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
