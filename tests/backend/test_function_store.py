"""The function store: a stored function pickles without deep recursion and loads bound to the caller's shared
variables; an entry naming code is refused by the safe loader before anything in it runs."""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from theanompi.backend.function_store import pickle_function, unpickle_function
from theanompi.core.safe_load import UnsafePickleError


def test_a_deep_graph_pickles_without_deep_recursion():
    """Nodes are written inputs first, so pickle's recursion does not follow the graph's depth."""
    x = pt.matrix("x")
    w = pytensor.shared(np.eye(3, dtype=x.dtype) * 2, name="w")
    h = x
    for _ in range(600):
        h = pt.dot(h, w) * np.asarray(0.5, dtype=x.dtype)  # 1,200 nodes deep before rewriting
    f = pytensor.function([x], h)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300)
    try:
        blob = pickle_function(f.maker, [w])
    finally:
        sys.setrecursionlimit(limit)
    loaded = unpickle_function(blob, [w])[0].create()
    ones = np.ones((2, 3), dtype=x.dtype)
    np.testing.assert_allclose(loaded(ones), f(ones))


class Payload:
    """Pickled code: unpickling it leaves ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_an_entry_naming_code_is_refused_before_it_runs(tmp_path):
    w = pytensor.shared(np.float32(1.0), name="w")
    marker = tmp_path / "payload-ran"
    with pytest.raises(UnsafePickleError, match=r"'evil\.pkl': it references the global '(posix|nt)\.system'"):
        unpickle_function(pickle.dumps((Payload(marker), None, [])), [w], source="evil.pkl")
    assert not marker.exists()


def test_only_the_shared_containers_may_be_referred_to():
    x = pt.vector("x")
    w = pytensor.shared(np.ones(2, dtype=x.dtype), name="w")
    f = pytensor.function([x], x * w)
    blob = pickle_function(f.maker, [w])
    maker, modules = unpickle_function(blob, [w])
    assert maker.create()(np.ones(2, dtype=x.dtype)).tolist() == [1.0, 1.0] and modules == []
    with pytest.raises(UnsafePickleError, match=r"persistent id \(\('shared-container', 0\)\) that stands for nothing"):
        unpickle_function(blob, [])  # the graph being compiled has no shared variable 0
