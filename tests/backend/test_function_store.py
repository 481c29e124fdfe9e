"""The function store: a stored function pickles without deep recursion and loads bound to the caller's shared
variables."""

from __future__ import annotations

import sys

import numpy as np
import pytensor
import pytensor.tensor as pt

from theanompi.backend.function_store import pickle_function, unpickle_function


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

