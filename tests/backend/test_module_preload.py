"""Loading a cached function registers only its own C modules with pytensor (no read of the whole compile
directory), computes what a fresh compile does, and leaves pytensor's cache consistent for later compiles
and for a module removed meanwhile. Each process is a fresh interpreter with its own compile directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from conftest import run_python_in_cache

#: "store": compile f (stored with its modules) and an unrelated g; "load": f from the cache, then a new h
CHILD = """
import json, sys
import numpy as np
import theanompi, pytensor, pytensor.tensor as pt
from pytensor.link.c import cmodule
from theanompi.backend.function_cache import cached_function
from theanompi.backend.module_preload import module_dirs

x = pt.vector("x", dtype="float32")
w = pytensor.shared(np.arange(4, dtype="float32"), name="w", shape=(4,))
f = cached_function([x], [pt.exp(x) * w + 1], updates=[(w, w * 2)])
out = {"f": [float(v) for v in f(np.ones(4, dtype="float32"))[0]], "f_modules": module_dirs(f)}
if sys.argv[1] == "store":
    g = pytensor.function([x], pt.sum(pt.tanh(x) ** 3))
    g(np.ones(4, dtype="float32"))
else:
    cache = cmodule._module_cache
    out["registered"] = len(cache.loaded_key_pkl)
    h = pytensor.function([x], pt.cumsum(pt.log1p(x * x)))  # a module nobody has built yet
    out["h"] = [float(v) for v in h(np.ones(4, dtype="float32"))]
    out["registered_after_h"] = len(cache.loaded_key_pkl)
print(json.dumps(out))
"""


def run_child(cache: Path, mode: str) -> tuple[dict, str]:
    return run_python_in_cache(CHILD, cache, mode)


def module_entries(cache: Path) -> list[Path]:
    return [p.parent for p in cache.glob("pytensor/compiledir_*/*/key.pkl")]


def test_a_loaded_function_reads_only_its_own_modules(tmp_path):
    stored, _ = run_child(tmp_path, "store")
    total = len(module_entries(tmp_path))
    assert 1 <= len(stored["f_modules"]) < total  # g's modules are in the directory too
    loaded, stderr = run_child(tmp_path, "load")
    assert loaded["f"] == stored["f"]
    assert loaded["f_modules"] == stored["f_modules"]
    assert loaded["registered"] == len(stored["f_modules"])  # not the whole directory
    # a compile of something new afterwards: pytensor's full refresh, without clashing with the preloaded keys
    assert loaded["registered_after_h"] > total - 1
    np.testing.assert_allclose(loaded["h"], np.cumsum([np.log1p(1.0)] * 4), rtol=1e-6)
    assert "not supposed to happen" not in stderr and "Traceback" not in stderr


def test_a_module_removed_meanwhile_is_built_again_and_the_entry_updated(tmp_path):
    stored, _ = run_child(tmp_path, "store")
    compiledir = next(tmp_path.glob("pytensor/compiledir_*"))
    shutil.rmtree(compiledir / stored["f_modules"][0])
    loaded, stderr = run_child(tmp_path, "load")
    assert loaded["f"] == stored["f"]
    assert "Traceback" not in stderr
    assert stored["f_modules"][0] not in loaded["f_modules"]  # rebuilt elsewhere
    again, _ = run_child(tmp_path, "load")
    assert again["f_modules"] == loaded["f_modules"]
    assert again["registered"] == len(loaded["f_modules"])  # the entry names the rebuilt module now


def test_an_unexpected_pytensor_registers_nothing_and_says_why(monkeypatch, caplog):
    from theanompi.backend import module_preload

    def moved(*args, **kwargs):
        raise AttributeError("'ModuleCache' object has no attribute 'entry_from_key'")

    monkeypatch.setattr(module_preload, "_module_cache_without_refresh", moved)
    with caplog.at_level("WARNING", logger="theanompi.backend.module_preload"):
        assert module_preload.preload_modules(["tmpabc"]) == 0
    assert "not what this version expects (AttributeError" in caplog.text


def test_a_module_key_naming_code_is_not_registered_and_never_runs(tmp_path):
    """A key.pkl is read with the safe loader (what a compiled graph names): one that names os.system is skipped."""
    import os
    import pickle
    from types import SimpleNamespace

    from theanompi.backend import module_preload

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'payload-ran'}",))

    root = tmp_path / "tmpabc"
    root.mkdir()
    (root / "tmpabc.so").write_bytes(b"")
    (root / "key.pkl").write_bytes(pickle.dumps(Payload()))
    cache = SimpleNamespace(age_thresh_use=float("inf"), module_hash_to_key_data={}, entry_from_key={},
                            similar_keys={}, loaded_key_pkl=set())
    assert module_preload._register(cache, str(root), ()) is False
    assert not (tmp_path / "payload-ran").exists() and cache.loaded_key_pkl == set()
