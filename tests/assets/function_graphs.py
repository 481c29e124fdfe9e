"""A small training step's graph (an input, two shared variables, momentum updates), for the function cache's tests:
its source also runs in a fresh process (tests/backend/test_graph_signature.py)."""

import numpy as np
import pytensor
import pytensor.tensor as pt


def small_graph(momentum=0.9, dtype="float32", shape=(None, 3)):
    x = pt.tensor("x", dtype=dtype, shape=shape)
    w = pytensor.shared(np.ones(3, dtype=dtype), name="w")
    v = pytensor.shared(np.zeros(3, dtype=dtype), name="v")
    loss = ((x @ w) ** 2).mean()
    v_new = momentum * v - 0.1 * pytensor.grad(loss, w)
    return [x], [loss], [(v, v_new), (w, w + v_new)]
