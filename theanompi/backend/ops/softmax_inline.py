"""A rewrite that compiles softmax and log-softmax into C code.

pytensor 3 represents ``softmax`` and ``log_softmax`` as symbolic ops (``OpFromGraph``
subclasses) and leaves them in compiled functions. The C backend then runs each one
through Python: ``perform`` calls an inner function that pytensor compiles on the first
call. That first call costs 0.1–0.4 s per function in every process, and no cache keeps
it. Every later step pays a Python call per node. This module registers a
specialize-phase rewrite, tagged ``theanompi_inline_softmax``, that replaces both ops by
their own inner graphs: the same max-shifted formulas, which then fuse with the
elementwise code around them.

Importing :mod:`theanompi.backend.ops` (or :mod:`theanompi.models.base`) registers it.
``mode.excluding("theanompi_inline_softmax")`` compiles without it.

Example
-------
>>> import pytensor, pytensor.tensor as pt
>>> x = pt.matrix("x")
>>> f = pytensor.function([x], pt.special.log_softmax(x, axis=1))
>>> [type(n.op).__name__ for n in f.maker.fgraph.toposort() if "Softmax" in type(n.op).__name__]
[]
"""

from __future__ import annotations

from pytensor.graph import node_rewriter
from pytensor.tensor.rewriting.basic import register_specialize
from pytensor.tensor.rewriting.ofg import inline_ofg_node
from pytensor.tensor.special import LogSoftmax, Softmax

TAG = "theanompi_inline_softmax"


@register_specialize(TAG)
@node_rewriter([Softmax, LogSoftmax])
def inline_softmax(fgraph, node):
    """Replace a Softmax or LogSoftmax node by its inner graph."""
    return inline_ofg_node(node)
