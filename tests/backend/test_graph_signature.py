"""The graph's signature, the function cache's key: it follows the graph's structure (and nothing else), is the
same in another process, and a graph it cannot describe is named as such."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytensor
import pytest
from conftest import ASSETS, ROOT

sys.path.insert(0, str(ASSETS))
from function_graphs import small_graph

from theanompi.backend.graph_signature import Uncacheable, describe, graph_signature


def key_of(*args, **kwargs) -> str:
    return graph_signature(*small_graph(*args, **kwargs))[0]


def test_key_is_the_same_for_the_same_graph_built_twice_and_in_another_process():
    probe = ("import numpy as np, pytensor, pytensor.tensor as pt\n"
             "from theanompi.backend.graph_signature import graph_signature\n"
             f"{inspect.getsource(small_graph)}\n{inspect.getsource(key_of)}\nprint(key_of())")
    keys = {key_of(), key_of()}
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        keys.add(proc.stdout.strip().splitlines()[-1])
    assert len(keys) == 1, keys


@pytest.mark.parametrize("change", [{"momentum": 0.5}, {"dtype": "float64"}, {"shape": (4, 3)}])
def test_key_changes_with_a_constant_a_dtype_or_a_static_shape(change):
    assert key_of(**change) != key_of()


def test_key_changes_with_the_updates_and_the_borrow_flag():
    inputs, outputs, updates = small_graph()
    base = graph_signature(inputs, outputs, updates)[0]
    assert graph_signature(inputs, outputs, updates[:1])[0] != base
    assert graph_signature(inputs, [pytensor.Out(outputs[0], borrow=True)], updates)[0] != base


def test_uncacheable_descriptions_name_their_reason():
    with pytest.raises(Uncacheable, match="lambda"):
        describe({"f": lambda: 1})
    assert describe({"b": 2, "a": (1, 2.5)}) == describe({"a": (1, 2.5), "b": 2})
    assert json.dumps(describe(np.arange(3)))  # a printable, stable string
