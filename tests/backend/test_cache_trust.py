"""The caches hold code: a cache directory someone else could write into is refused with one line, and nothing
in it runs; an unwritable one (or a read-only HOME) costs one warning, not the import. Each case is a fresh
process whose cache holds planted payloads that, were they used, would leave a marker file:

* a function-cache entry (pickled code, in the current entry format) under the key of the probe's function;
* a ``pytensorrc-<hash>`` named as theanompi names it for that directory, whose compiler is a script that
  leaves a marker before it runs g++ (pytensor runs the compiler when it looks up its -march flags).

The probe computes in ``mode=FAST_COMPILE``: nothing to compile, in whichever cache directory.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from conftest import ROOT

from theanompi.backend.function_store import ENTRY_MAGIC
from theanompi.backend.graph_signature import graph_signature
from theanompi.backend.pytensor_config import pytensorrc_text

PROBE = """
import theanompi  # first, as a user script does: pytensor then reads the cache directory's pytensorrc
import numpy as np, pytensor, pytensor.tensor as pt
from theanompi.backend.function_cache import cached_function
x = pt.vector("x", dtype="float32")
w = pytensor.shared(np.float32(2.0), name="w")
f = cached_function([x], [x * w])
print(float(f(np.ones(2, dtype="float32"))[0].sum()))
"""
FOREIGN_UID = 54321


class Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def probe_key() -> str:
    """The function cache's key of PROBE's function in the probe's process (mode=FAST_COMPILE, the default compiler)."""
    with pytensor.config.change_flags(mode="FAST_COMPILE"):
        x = pt.vector("x", dtype="float32")
        w = pytensor.shared(np.float32(2.0), name="w")
        return graph_signature([x], [x * w])[0]


def plant(cache: Path, markers: Path) -> dict[str, Path]:
    """A cache directory with both payloads in it; returns the planted paths."""
    (cache / "functions").mkdir(parents=True)
    key = probe_key()
    entry = cache / "functions" / f"{key}.pkl"
    entry.write_bytes(ENTRY_MAGIC + key.encode() + b"\n" + pickle.dumps(Payload(markers / "entry-ran")))
    compiler = markers / "evil-g++"
    compiler.write_text(f"#!/bin/sh\ntouch {markers / 'compiler-ran'}\nexec g++ \"$@\"\n")
    compiler.chmod(0o755)
    text = pytensorrc_text(cache)
    rc = cache / f"pytensorrc-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    rc.write_text(text.replace("[global]\n", f"[global]\ncxx = {compiler}\n"))
    return {"entry": entry, "rc": rc}


def run_probe(cache: Path, **env_changes: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTENSORRC", "THEANOMPI_FUNCTION_CACHE")}
    env.update(THEANOMPI_CACHE_DIR=str(cache), PYTENSOR_FLAGS="mode=FAST_COMPILE", PYTHONPATH=str(ROOT), **env_changes)
    return subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


def refusals(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "is not used" in line]


# case -> (make the planted cache untrustworthy, fragment of the one line)
UNTRUSTED = {
    "root writable by others": (lambda cache, planted: cache.chmod(0o777), "is writable by group and others "
                                                                         "(mode 0777)"),
    "root writable by its group": (lambda cache, planted: cache.chmod(0o770), "is writable by group (mode 0770)"),
    "a folder in it writable by others": (lambda cache, planted: (cache / "functions").chmod(0o757),
                                          "functions is writable by others (mode 0757)"),
    "an entry owned by another user": (lambda cache, planted: os.chown(planted["entry"], FOREIGN_UID, -1),
                                       f"is owned by uid {FOREIGN_UID}, not by this user"),
    "the pytensorrc owned by another user": (lambda cache, planted: os.chown(planted["rc"], FOREIGN_UID, -1),
                                             f"is owned by uid {FOREIGN_UID}, not by this user"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(UNTRUSTED))
def test_a_cache_others_could_write_is_refused_and_nothing_in_it_runs(tmp_path, case):
    if os.geteuid() != 0 and "owned by" in case:
        pytest.skip("chown to another user needs root")
    cache, markers = tmp_path / "cache", tmp_path / "markers"
    markers.mkdir()
    make_untrusted, fragment = UNTRUSTED[case]
    planted = plant(cache, markers)
    if "root" not in case:
        cache.chmod(0o755)
    make_untrusted(cache, planted)
    proc = run_probe(cache)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "4.0"
    assert sorted(p.name for p in markers.iterdir()) == ["evil-g++"]  # neither payload ran
    (line,) = refusals(proc.stderr)
    assert f"the cache {cache} is not used: " in line and fragment in line, line
    assert "compiling with the caches off" in line and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_private_cache_is_used(tmp_path):
    """The same probe, a cache of the user's own that nobody else may write: used, without a word."""
    cache = tmp_path / "cache"
    first = run_probe(cache)
    assert first.returncode == 0, first.stderr
    assert oct(cache.stat().st_mode & 0o777) == "0o700" and len(list((cache / "functions").glob("*.pkl"))) == 1
    again = run_probe(cache)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == "4.0"
    assert refusals(first.stderr + again.stderr) == []


@pytest.mark.slow
@pytest.mark.parametrize("unwritable", ["cache directory", "HOME"])
def test_an_unwritable_cache_or_home_costs_one_warning_not_the_import(tmp_path, unwritable):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a read-only mount")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTENSORRC", "THEANOMPI_CACHE_DIR")}
    env.update(PYTHONPATH=str(ROOT), PYTENSOR_FLAGS="mode=FAST_COMPILE")
    if unwritable == "HOME":
        env["HOME"] = str(mnt)
    else:
        env["THEANOMPI_CACHE_DIR"] = str(mnt / "cache")
    code = PROBE
    script = f'mount -t tmpfs -o ro,size=1m tmpfs "{mnt}" || exit 99; exec "{sys.executable}" -c "$0"'
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    if proc.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "4.0"
    (line,) = refusals(proc.stderr)
    assert "cannot be created: Read-only file system" in line, line
    assert "Traceback" not in proc.stderr
