"""The remembered -march flags: the first process stores what pytensor detected, later ones reuse it without
running g++, and a damaged file is detected again (each case in a fresh interpreter: the flags are per process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_python_in_cache

from theanompi.backend import march_flags as mf

#: prints the flags in use; with "offline", g++ cannot be run (pytensor would need it to detect them)
PROBE = """
import json, sys
import theanompi
from pytensor.link.c import cmodule
if sys.argv[1] == "offline":
    def no_compiler(*args, **kwargs):
        raise AssertionError("g++ was run")
    cmodule.subprocess_Popen = no_compiler
    cmodule.GCC_compiler.try_compile_tmp = staticmethod(no_compiler)
from theanompi.backend.march_flags import use_remembered_march_flags
flags = use_remembered_march_flags()
args = cmodule.GCC_compiler.compile_args()
print(json.dumps({"flags": flags, "in_args": all(f in args for f in flags)}))
"""


def probe(cache: Path, mode: str) -> tuple[dict, str]:
    return run_python_in_cache(PROBE, cache, mode, timeout=120)


def stored_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("march-flags-*.json"))


def test_detected_once_then_reused_without_running_the_compiler(tmp_path):
    detected, _ = probe(tmp_path, "detect")
    assert detected["flags"] is not None and detected["in_args"]
    (stored,) = stored_files(tmp_path)
    assert json.loads(stored.read_text())["flags"] == detected["flags"]
    reused, _ = probe(tmp_path, "offline")
    assert reused == detected


def test_a_damaged_file_is_detected_again_and_rewritten(tmp_path):
    detected, _ = probe(tmp_path, "detect")
    (stored,) = stored_files(tmp_path)
    stored.write_text("{not json")
    again, stderr = probe(tmp_path, "detect")
    assert again == detected
    assert "ignoring unreadable" in stderr
    assert json.loads(stored.read_text())["flags"] == detected["flags"]


@pytest.mark.parametrize("change", ["cxxflags", "pytensor", "cpu"])
def test_the_file_is_per_compiler_settings_and_cpu(change):
    base = {"cache_dir": Path("/c"), "cxx": sys.executable, "cxxflags": "", "pytensor_version": "3.0",
            "cpu": "model name: A"}
    other = dict(base, **{"cxxflags": {"cxxflags": "-O2"}, "pytensor": {"pytensor_version": "3.1"},
                          "cpu": {"cpu": "model name: B"}}[change])
    assert mf.flags_file(**base) != mf.flags_file(**other)
    assert mf.flags_file(**base) == mf.flags_file(**dict(base))


def test_no_compiler_no_file():
    assert mf.flags_file(Path("/c"), "no-such-compiler-xyz", "", "3.0", cpu="") is None


def test_cpu_identity_reads_the_first_processor_only(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nmodel name : A\nflags : sse avx\n\nprocessor : 1\nmodel name : B\n")
    assert mf.cpu_identity(info) == "model name : A\nflags : sse avx"


def test_the_compiler_setting_is_part_of_the_key(tmp_path):
    """pytensor decides from the name in config.cxx whether to detect at all: two names of one binary differ."""
    alias = tmp_path / "c++"
    alias.symlink_to(sys.executable)
    by_name = mf.flags_file(Path("/c"), str(alias), "", "3.0", cpu="")
    by_path = mf.flags_file(Path("/c"), sys.executable, "", "3.0", cpu="")
    assert mf.compiler_identity(str(alias)) == mf.compiler_identity(sys.executable)
    assert by_name != by_path
