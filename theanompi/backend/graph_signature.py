"""The signature of a pytensor function's graph: what the function cache keys a compiled function by.

:func:`graph_signature` is a SHA-256 of :func:`signature_lines`: every Apply node of
the graph (op class and properties, input and output types), every constant's
bytes, the position of every explicit input and shared variable, the outputs (with
their borrow flags) and the updates (explicit and default ones), plus the versions
of python, numpy, pytensor, theanompi's own source and the pytensor settings that
change compilation (:func:`environment`). Variable names and shared *values* are
not in it: a function computes the same for any parameter values. A graph it cannot
describe exactly (an op property it has no rule for, an inner graph such as Scan's)
raises :class:`Uncacheable`.

:func:`graph_packages` names the packages that define the graph's ops and types:
a function stored for this graph may name their classes
(:mod:`theanompi.backend.graph_pickles`).

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> w = pytensor.shared(np.float32(2.0), name="w")
>>> x = pt.scalar("x", dtype="float32")
>>> key, shared = graph_signature([x], [x * w], [(w, w + 1)])
>>> len(key), shared == [w]
(64, True)
>>> graph_signature([x], [x * w], [(w, w + 2)])[0] == key
False
>>> sorted(graph_packages([x * w], [(w, w + 1)]))
['pytensor']
"""

from __future__ import annotations

import enum
import hashlib
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytensor
from pytensor import config
from pytensor.compile.io import Out
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph

#: pytensor settings that change what a compiled function is or computes
CONFIG_FLAGS = ("floatX", "mode", "linker", "optimizer", "optimizer_including", "optimizer_excluding",
                "optimizer_requiring", "allow_gc", "cxx", "blas__ldflags", "openmp", "openmp_elemwise_minsize",
                "gcc__cxxflags", "cast_policy", "deterministic", "check_input", "tensor__cmp_sloppy",
                "compute_test_value")
#: how deep a value inside an op's properties may nest before it counts as indescribable
MAX_DEPTH = 12


class Uncacheable(Exception):
    """The graph has a part :func:`graph_signature` cannot describe exactly; compile without the cache."""


def describe(value, depth: int = 0) -> str:
    """A description of an op property (or type) that is equal for equal values in any process.

    Example
    -------
    >>> describe((1, "a", None, np.float32(0.5)))
    "(1,'a',None,float32:0.5)"
    >>> describe(lambda: 0)
    Traceback (most recent call last):
    theanompi.backend.graph_signature.Uncacheable: a lambda in an op's properties
    """
    if depth > MAX_DEPTH:
        raise Uncacheable("op properties nest too deep")
    if value is None or isinstance(value, bool | int | float | complex | str | bytes):
        return repr(value)
    if isinstance(value, tuple | list | Mapping | set | frozenset):
        return _describe_container(value, depth)
    if isinstance(value, np.dtype | np.generic | np.ndarray):
        return _describe_numpy(value, depth)
    return _describe_object(value, depth)


def _describe_container(value, depth: int) -> str:
    """:func:`describe` of a tuple, list, mapping or set: its items described, sets and mappings sorted."""
    if isinstance(value, tuple | list):
        return "(" + ",".join(describe(v, depth + 1) for v in value) + ")"
    if isinstance(value, Mapping):  # pytensor's frozendict too (its cached hash is not part of it)
        items = sorted((describe(k, depth + 1), describe(v, depth + 1)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    return "{" + ",".join(sorted(describe(v, depth + 1) for v in value)) + "}"


def _describe_numpy(value, depth: int) -> str:
    """:func:`describe` of a NumPy dtype, scalar or array (an array by its dtype, shape and a hash of its data)."""
    if isinstance(value, np.dtype):
        return f"dtype:{value.str}"
    if isinstance(value, np.generic):
        return f"{value.dtype}:{value.item()!r}" if value.shape == () else describe(np.asarray(value), depth)
    # numpy's stubs make ndarray a Buffer only for Python >= 3.12
    digest = hashlib.sha256(np.ascontiguousarray(value)).hexdigest()  # type: ignore[arg-type]
    return f"array:{value.dtype.str}:{value.shape}:{digest}"


def _describe_object(value, depth: int) -> str:
    """:func:`describe` of anything else: a slice, an enum member, a type, a named function, or an object by its
    ``__props__`` (an op) or its attributes; Uncacheable for lambdas and inner graphs."""
    if isinstance(value, slice):
        return f"slice{describe((value.start, value.stop, value.step), depth + 1)}"
    if isinstance(value, enum.Enum):
        return f"{_qualified(type(value))}.{value.name}"
    if isinstance(value, type):
        return _qualified(value)
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        if "<lambda>" in value.__qualname__ or "<locals>" in value.__qualname__:
            raise Uncacheable("a lambda in an op's properties")
        return _qualified(value)
    if _is_graph_object(value):
        raise Uncacheable(f"an inner graph ({type(value).__name__}) in an op's properties")
    props = getattr(type(value), "__props__", None)
    fields: Iterable[tuple[str, Any]]
    if props is not None:
        fields = ((name, getattr(value, name)) for name in props)
    elif hasattr(value, "__dict__"):
        fields = sorted(vars(value).items())
    else:
        raise Uncacheable(f"cannot describe a {type(value).__name__} in an op's properties")
    body = ",".join(f"{name}={describe(v, depth + 1)}" for name, v in fields)
    return f"{_qualified(type(value))}({body})"


def _qualified(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _is_graph_object(value) -> bool:
    return isinstance(value, Variable | Apply | FunctionGraph)


def ordered_nodes(outputs) -> list:
    """The Apply nodes ``outputs`` depend on, inputs before users, in an order fixed by the graph's structure.

    (The function store pickles a function's nodes in this order, so pickle's recursion stays shallow.)

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> x = pt.vector("x")
    >>> [str(node.op) for node in ordered_nodes([pt.exp(x) * 2])]
    ['Exp', 'ExpandDims{axis=0}', 'Mul']
    """
    order, done = [], set()
    for out in outputs:
        if out.owner is None or out.owner in done:
            continue
        stack, entered = [(out.owner, iter(out.owner.inputs))], {out.owner}
        while stack:
            node, pending = stack[-1]
            for var in pending:
                child = var.owner
                if child is not None and child not in done and child not in entered:
                    entered.add(child)
                    stack.append((child, iter(child.inputs)))
                    break
            else:
                stack.pop()
                done.add(node)
                order.append(node)
    return order


def update_pairs(updates) -> list[tuple]:
    """``updates`` (a dict, a list of pairs or None) as a list of (shared variable, new value) pairs."""
    if updates is None:
        return []
    return list(updates.items()) if isinstance(updates, dict) else [tuple(pair) for pair in updates]


def graph_signature(inputs: Sequence, outputs: Sequence, updates=None) -> tuple[str, list]:
    """``(key, shared)``: the cache key of this function's graph and its shared variables in key order.

    Raises :class:`Uncacheable` for a graph it cannot describe exactly.
    """
    lines, shared = signature_lines(inputs, outputs, updates)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest(), shared


def signature_lines(inputs: Sequence, outputs: Sequence, updates=None) -> tuple[list[str], list]:
    """The text :func:`graph_signature` hashes, one line per root, node, output and update (to compare
    two graphs whose keys differ), and the shared variables in key order."""
    if not all(isinstance(v, Variable) and not isinstance(v, SharedVariable | Constant) for v in inputs):
        raise Uncacheable("an input is not a plain symbolic variable")
    outs = [(o.variable, bool(o.borrow)) if isinstance(o, Out) else (o, False) for o in outputs]
    explicit = update_pairs(updates)
    updated = {id(target) for target, _ in explicit}

    text = _GraphLines(inputs)
    ids, shared, lines = text.ids, text.shared, text.lines
    for v in inputs:
        text.var_id(v)
    text.add_graph([v for v, _ in outs] + [value for _, value in explicit])
    lines.append("outputs:" + ",".join(f"v{ids[id(v)]}{'b' if borrow else ''}" for v, borrow in outs))
    for target, value in explicit:
        lines.append(f"update:v{text.var_id(target)}=v{ids[id(value)]}")
    # pytensor.function also applies each shared variable's default_update that no explicit update replaces
    seen = 0
    while seen < len(shared):
        var = shared[seen]
        seen += 1
        default = getattr(var, "default_update", None)
        if default is not None and id(var) not in updated:
            text.add_graph([default])
            lines.append(f"default_update:v{ids[id(var)]}=v{ids[id(default)]}")
    lines.append(environment())
    return lines, shared


class _GraphLines:
    """The lines of :func:`signature_lines` as a graph is walked: every variable numbered once, in order of first
    use (``ids``), a root line for each input, shared variable and constant, a line per node (``lines``), and the
    shared variables in that order (``shared``)."""

    def __init__(self, inputs: Sequence):
        self.ids: dict[int, int] = {}
        self.shared: list = []
        self.lines: list[str] = []
        self.input_position = {id(v): k for k, v in enumerate(inputs)}

    def var_id(self, var) -> int:
        ids, lines = self.ids, self.lines
        key = id(var)
        if key not in ids:
            if var.owner is not None:
                raise Uncacheable("a variable was used before its node")  # cannot happen for a DAG
            if key in self.input_position:
                lines.append(f"v{len(ids)}=input{self.input_position[key]}:{describe(var.type)}")
            elif isinstance(var, SharedVariable):
                lines.append(f"v{len(ids)}=shared{len(self.shared)}:{describe(var.type)}")
                self.shared.append(var)
            elif isinstance(var, Constant):
                lines.append(f"v{len(ids)}=constant:{describe(var.type)}:{describe(var.data)}")
            else:
                raise Uncacheable(f"the graph needs a variable that is not an input: {var}")
            ids[key] = len(ids)
        return ids[key]

    def add_graph(self, roots) -> None:
        ids = self.ids
        for node in ordered_nodes(roots):
            if id(node.outputs[0]) in ids:
                continue
            args = ",".join(f"v{self.var_id(v)}" for v in node.inputs)
            for out in node.outputs:
                ids[id(out)] = len(ids)
            results = ",".join(describe(o.type) for o in node.outputs)
            self.lines.append(f"node:{describe(node.op)}({args})->{results}")
        for var in roots:
            self.var_id(var)


_ENVIRONMENT: list[str] = []


def environment() -> str:
    """Versions and settings a compiled function depends on besides its graph (computed once per process)."""
    if not _ENVIRONMENT:
        digest = hashlib.sha256()
        root = Path(__file__).resolve().parents[1]  # the theanompi package
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".h", ".c") and path.is_file():
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
        _ENVIRONMENT.append(f"python {sys.version}; numpy {np.__version__}; pytensor {pytensor.__version__}; "
                            f"theanompi source {digest.hexdigest()}")
    flags = "; ".join(f"{name}={getattr(config, name, None)!s}" for name in CONFIG_FLAGS)
    return f"{_ENVIRONMENT[0]}; {flags}"


def graph_packages(outputs: Sequence, updates=None) -> frozenset[str]:
    """The top-level packages that define the ops (and their scalar ops) and the types of the graph of ``outputs``
    and ``updates``' new values."""
    roots = [o.variable if isinstance(o, Out) else o for o in outputs] + [value for _, value in update_pairs(updates)]
    found = set()
    for node in ordered_nodes(roots):
        for part in (node.op, getattr(node.op, "scalar_op", None), *(v.type for v in node.outputs)):
            if part is not None:
                found.add(type(part).__module__.partition(".")[0])
    return frozenset(found)
