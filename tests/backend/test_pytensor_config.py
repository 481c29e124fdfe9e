"""theanompi's pytensor configuration holds whatever the import order; OPENBLAS_CORETYPE is chosen and reported.

Each case runs in a fresh interpreter, since pytensor reads its configuration at import.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from theanompi.backend.pytensor_config import (
    AVX512_FEATURES,
    choose_openblas_coretype,
    default_cache_dir,
    pytensorrc_text,
    usable_cpu_features,
)

ROOT = Path(__file__).resolve().parents[2]

REPORT = """
import json, numpy as np, pytensor, pytensor.tensor as pt
from pytensor import config
from theanompi.backend.pytensor_config import blas_report
x = pt.matrix("x")
f = pytensor.function([x], pt.dot(x, x))
a = np.arange(16, dtype=config.floatX).reshape(4, 4) / 16
assert np.allclose(f(a), a @ a, rtol=1e-5)
print(json.dumps({"mode": str(config.mode), "linker": config.linker, "floatX": config.floatX,
                  "blas": config.blas__ldflags, "compiledir": str(config.compiledir),
                  "ops": [type(node.op).__name__ for node in f.maker.fgraph.toposort()], **blas_report()}))
"""


def run_python(code: str, **env_changes: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTENSORRC", "PYTENSOR_FLAGS", "OPENBLAS_CORETYPE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update({k: v for k, v in env_changes.items() if v is not None})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)


def report(first_import: str, **env_changes: str | None) -> dict:
    proc = run_python(f"{first_import}\nimport theanompi.nn\n{REPORT}", **env_changes)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("first_import", ["import theanompi", "import pytensor", "import pytensor.tensor as pt"])
def test_any_import_order_gives_c_backend_with_blas(first_import):
    got = report(first_import)
    assert (got["mode"], got["linker"], got["floatX"]) == ("FAST_RUN", "cvm", "float32")
    assert "scipy_sgemm_" in got["blas"]                  # the real BLAS, not NumPy's C-API fallback
    assert got["ops"] == ["Dot22"] and got["compiledir"].startswith(str((default_cache_dir() / "pytensor").resolve()))


@pytest.mark.slow
def test_pytensor_first_keeps_the_users_own_flags():
    got = report("import pytensor", PYTENSOR_FLAGS="floatX=float64,mode=FAST_COMPILE")
    assert (got["floatX"], got["mode"], got["linker"]) == ("float64", "FAST_COMPILE", "cvm")
    assert "scipy_sgemm_" in got["blas"]


def test_setting_that_cannot_change_any_more_stops_with_one_line():
    code = ("import pytensor\n"
            "pytensor.config._config_var_dict['linker']._mutable = False\n"  # as a frozen setting behaves
            "import theanompi\n")
    proc = run_python(code)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: pytensor was imported before theanompi")
    assert "import theanompi before pytensor" in last


@pytest.mark.slow
def test_openblas_coretype_user_choice_wins_and_is_reported():
    got = report("import theanompi", OPENBLAS_CORETYPE="Haswell")
    assert (got["coretype"], got["chosen_by"], got["corename"]) == ("Haswell", "user", "Haswell")


@pytest.mark.slow
def test_openblas_coretype_follows_the_os_enabled_cpu_features():
    got = report("import theanompi")
    if all(usable_cpu_features().get(name) for name in AVX512_FEATURES):
        assert (got["coretype"], got["chosen_by"], got["corename"]) == ("SkylakeX", "theanompi", "SkylakeX")
    else:  # AVX-512 kernels would die of SIGILL here: OpenBLAS's own choice stands
        assert (got["coretype"], got["chosen_by"]) == (None, "openblas") and got["corename"]


DAMAGE = {
    "cut short": lambda text: text[: len(text) // 3],
    "its [blas] section cut": lambda text: text[: text.index("[blas]")],
    "not text at all": lambda text: "\udcff\x00" * 40,
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_pytensorrc_is_rewritten_and_pytensor_gets_every_setting(tmp_path, damage):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    text = pytensorrc_text(cache)
    rc = cache / f"pytensorrc-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    rc.write_bytes(DAMAGE[damage](text).encode(errors="surrogateescape"))
    code = "import theanompi, pytensor; print(pytensor.config.linker, pytensor.config.blas__ldflags)"
    proc = run_python(code, THEANOMPI_CACHE_DIR=str(cache))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "cvm" and "scipy_sgemm_" in proc.stdout  # the [blas] section is back
    assert f"{rc} was damaged" in proc.stderr and "Traceback" not in proc.stderr
    assert rc.read_text() == text


def test_choose_openblas_coretype_without_avx512_leaves_the_environment_alone():
    env: dict[str, str] = {}
    features = {name: True for name in AVX512_FEATURES} | {"AVX512BW": False}
    assert choose_openblas_coretype(env, features=features) == (None, "openblas") and env == {}


def test_import_lets_idle_threads_sleep_unless_the_user_chose():
    """OMP_WAIT_POLICY / OPENBLAS_THREAD_TIMEOUT are set before libgomp and OpenBLAS load; a user's value stays."""
    code = "import os, theanompi; print(os.environ['OMP_WAIT_POLICY'], os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}
    env["PYTHONPATH"] = str(ROOT)
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert unset.stdout.split() == ["PASSIVE", "4"], unset.stderr
    users = subprocess.run([sys.executable, "-c", code], env={**env, "OMP_WAIT_POLICY": "ACTIVE"},
                           capture_output=True, text=True, timeout=120)
    assert users.stdout.split() == ["ACTIVE", "4"], users.stderr
