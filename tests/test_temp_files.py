"""The suite's temporary files stay under pytest's basetemp (tests/conftest.py's ``suite_tempdir``), which pytest
prunes: docstring examples' ``tempfile.mkdtemp()``, pytensor's JAX sources and the subprocesses' files (TMPDIR)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def test_tempfile_writes_under_pytests_basetemp(suite_tempdir: Path, tmp_path_factory: pytest.TempPathFactory):
    basetemp = tmp_path_factory.getbasetemp()
    assert suite_tempdir.parent == basetemp
    made = Path(tempfile.mkdtemp())
    assert made.parent == suite_tempdir
    with tempfile.NamedTemporaryFile(delete=False) as file:  # what pytensor's JAX linker does
        assert Path(file.name).parent == suite_tempdir


def test_subprocesses_get_the_same_temp_directory(suite_tempdir: Path):
    assert os.environ["TMPDIR"] == str(suite_tempdir)
    proc = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"], capture_output=True,
                          text=True, check=True)
    assert Path(proc.stdout.strip()).parent == suite_tempdir
