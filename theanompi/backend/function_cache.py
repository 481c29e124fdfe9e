"""A disk cache of compiled pytensor functions, keyed by the structure of their graphs.

``pytensor.function`` spends most of a warm compile (the C modules already built)
rewriting the graph: ~10 s of ResNet-20's 12.5 s per rank, every rank, every run.
:func:`cached_function` compiles like ``pytensor.function`` and keeps the rewritten
function (its ``FunctionMaker``) in ``<cache dir>/functions/<key>.pkl``; the next
process that builds the same graph loads it and only links the C thunks.

The key is a SHA-256 of :func:`graph_signature`: every Apply node of the graph (op
class and properties, input and output types), every constant's bytes, the
position of every explicit input and shared variable, the outputs (with their
borrow flags) and the updates (explicit and default ones), plus the versions of
python, numpy, pytensor, theanompi's own source and the pytensor settings that
change compilation. Variable names and shared *values* are not in it: a function
computes the same for any parameter values. A graph it cannot describe exactly
(an op property it has no rule for, an inner graph such as Scan's) is compiled
as usual and not cached (:class:`Uncacheable`).

The shared variables are not stored: they are pickled as references to their
position in the graph and, on loading, bound to the shared variables of the
graph being compiled, so the loaded function reads and updates the model's own
parameters. Only C-backend functions are cached (``mode=None``).

The cache holds pickles and so is trusted like pytensor's compile directory: it
lives in the user's own cache directory (``THEANOMPI_CACHE_DIR``, created 0700),
used only when that directory and everything in it is the user's and writable by
nobody else (:func:`theanompi.backend.pytensor_config.cache_root`; else the cache
is off). An entry is read only if it is a regular file of the user's, and it
must name the key it was stored under (its first line):
an entry of another graph, of an older format or damaged is compiled again and
replaced, with a warning naming it; a directory, FIFO or link in an entry's
place is left alone and the function compiled without the cache.
``THEANOMPI_FUNCTION_CACHE=off`` turns it off.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> w = pytensor.shared(np.float32(2.0), name="w")
>>> x = pt.scalar("x", dtype="float32")
>>> f = cached_function([x], [x * w], updates=[(w, w + 1)])
>>> float(f(np.float32(3.0))[0]), float(w.get_value())
(6.0, 3.0)
>>> key, shared = graph_signature([x], [x * w], [(w, w + 1)])
>>> len(key), shared == [w]
(64, True)
"""

from __future__ import annotations

import enum
import hashlib
import io
import logging
import os
import pickle
import stat
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
from pytensor.graph.destroyhandler import DestroyHandler
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.utils import Scratchpad

from theanompi.backend.march_flags import use_remembered_march_flags
from theanompi.backend.module_preload import module_dirs, preload_modules
from theanompi.backend.pytensor_config import FUNCTION_CACHE_ENV, cache_root
from theanompi.core.private_paths import make_private_dir, untrusted_entry
from theanompi.core.safe_io import atomic_write

log = logging.getLogger(__name__)

#: pytensor settings that change what a compiled function is or computes
CONFIG_FLAGS = ("floatX", "mode", "linker", "optimizer", "optimizer_including", "optimizer_excluding",
                "optimizer_requiring", "allow_gc", "cxx", "blas__ldflags", "openmp", "openmp_elemwise_minsize",
                "gcc__cxxflags", "cast_policy", "deterministic", "check_input", "tensor__cmp_sloppy",
                "compute_test_value")
#: entries kept: the oldest beyond this many are removed when one is added
MAX_ENTRIES = 200
#: and at most this many bytes in all
MAX_BYTES = 512 * 1024 * 1024
#: how deep a value inside an op's properties may nest before it counts as indescribable
MAX_DEPTH = 12
#: an entry's first line (then its key, then the pickle); another first line is an older format
ENTRY_MAGIC = b"theanompi function cache 2\n"


class Uncacheable(Exception):
    """The graph has a part :func:`graph_signature` cannot describe exactly; compile without the cache."""


# ----- the key -----------------------------------------------------------------------------------
def describe(value, depth: int = 0) -> str:
    """A description of an op property (or type) that is equal for equal values in any process.

    Example
    -------
    >>> describe((1, "a", None, np.float32(0.5)))
    "(1,'a',None,float32:0.5)"
    >>> describe(lambda: 0)
    Traceback (most recent call last):
    theanompi.backend.function_cache.Uncacheable: a lambda in an op's properties
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


def _ordered_nodes(outputs) -> list:
    """The Apply nodes ``outputs`` depend on, inputs before users, in an order fixed by the graph's structure."""
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


def _pairs(updates) -> list[tuple]:
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
    explicit = _pairs(updates)
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
        for node in _ordered_nodes(roots):
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


# ----- the store ---------------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where the functions are kept: ``<THEANOMPI_CACHE_DIR or ~/.cache/theanompi>/functions`` (see
    :func:`theanompi.backend.pytensor_config.cache_root`)."""
    return cache_root() / "functions"


def is_enabled() -> bool:
    """False when ``THEANOMPI_FUNCTION_CACHE`` is off/0/false/no (as it is when the cache directory is refused)."""
    return os.environ.get(FUNCTION_CACHE_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


_SPECIAL_FILES = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


class UnusableEntry(Exception):
    """A cache entry that must not be read (not a regular file, not the user's): compile without the cache."""


class StaleEntry(Exception):
    """A cache entry that is not this key's function (another graph's, an older format, cut short): replace it."""


def read_entry(path: Path, name: str) -> bytes | None:
    r"""The pickle stored for ``name`` in ``path``; None if there is none.

    Raises :class:`UnusableEntry` for anything but a regular file of this user's (opened without following
    links or waiting on a FIFO), :class:`StaleEntry` when it names another key.

    Example
    -------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "k.pkl").write_bytes(ENTRY_MAGIC + b"k\n" + b"PICKLE")
    >>> read_entry(d / "k.pkl", "k"), read_entry(d / "none.pkl", "none")
    (b'PICKLE', None)
    >>> read_entry(d / "k.pkl", "other")
    Traceback (most recent call last):
    theanompi.backend.function_cache.StaleEntry: it holds the function of another graph (k)
    >>> os.mkfifo(d / "f.pkl"); read_entry(d / "f.pkl", "f")
    Traceback (most recent call last):
    theanompi.backend.function_cache.UnusableEntry: it is a FIFO, not a file
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symbolic link; EISDIR...
        raise UnusableEntry(f"it cannot be opened as a file ({err.strerror or err})") from None
    st = os.fstat(fd)
    # its mode was checked with the whole directory's (cache_root): since then only the user could add to it
    problem = untrusted_entry(path, st, check_mode=False)
    if not stat.S_ISREG(st.st_mode):
        problem = f"it is {_SPECIAL_FILES.get(stat.S_IFMT(st.st_mode), 'a special file')}, not a file"
    if problem:
        os.close(fd)
        raise UnusableEntry(problem)
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    head, _, rest = data.partition(b"\n")
    if head + b"\n" != ENTRY_MAGIC:
        raise StaleEntry("it is not an entry of this version")
    stored, _, blob = rest.partition(b"\n")
    if stored != name.encode():
        raise StaleEntry(f"it holds the function of another graph ({stored[:64].decode(errors='replace')})")
    return blob


class _Pickler(pickle.Pickler):
    """Pickles the shared variables' containers as their positions, not their values."""

    def __init__(self, file, containers: list):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.position = {id(c): k for k, c in enumerate(containers)}

    def persistent_id(self, obj):
        k = self.position.get(id(obj))
        return None if k is None else ("shared-container", k)

    def reducer_override(self, obj):
        """A variable's tag without ``trace`` (where it was created: half the bytes, no use to a loaded function)."""
        if isinstance(obj, Scratchpad) and "trace" in obj.__dict__:
            return _new, (type(obj),), {k: v for k, v in obj.__dict__.items() if k != "trace"}
        if type(obj) is FunctionGraph:
            state = _without_rewriting_features(obj.__getstate__())
            state["clients"] = _live_clients(obj.clients, obj.variables)
            return _new, (FunctionGraph,), state
        if type(obj) is DestroyHandler:
            state = dict(vars(obj), clients=_live_clients(obj.clients, obj.fgraph.variables))
            return _new, (type(obj),), state
        return NotImplemented


#: features a compiled function's graph keeps only for rewriting it: with them a ResNet-20 step function
#: pickles the graphs of every shape it ever inferred (12016 Apply nodes for a 431-node function)
REWRITING_FEATURES = ("shape_feature", "merge_feature", "assumption_feature")


def _live_clients(clients: dict, variables) -> dict:
    """``clients`` without the variables the rewrites removed (no clients left; each keeps its old graph alive)."""
    return {var: users for var, users in clients.items() if users or var in variables}


def _without_rewriting_features(state: dict) -> dict:
    dropped = {id(state.pop(name)) for name in REWRITING_FEATURES if name in state}
    state["_features"] = [f for f in state["_features"] if id(f) not in dropped]
    state["_feature_methods"] = {k: f for k, f in state["_feature_methods"].items() if id(f) not in dropped}
    return state


def _new(cls):
    """An empty object of ``cls`` (its constructor not called); unpickling then fills in its attributes.

    Written as (callable, args, state), not (callable, args-with-state), so the object is in pickle's memo
    before its state: a graph and its features refer to each other.
    """
    return cls.__new__(cls)


class _Unpickler(pickle.Unpickler):
    """Binds the pickled positions to the containers of the graph being compiled."""

    def __init__(self, file, containers: list):
        super().__init__(file)
        self.containers = containers

    def persistent_load(self, pid):
        kind, k = pid
        if kind != "shared-container" or not 0 <= k < len(self.containers):
            raise pickle.UnpicklingError(f"unknown reference {pid!r}")
        return self.containers[k]


def _graph_variables(maker) -> list:
    """Every variable the maker refers to: its rewritten graph and the graph it was compiled from."""
    fgraph = maker.fgraph
    found = list(fgraph.outputs) + list(_live_clients(fgraph.clients, fgraph.variables))
    for spec in maker.inputs:
        found += [spec.variable] + ([spec.update] if spec.update is not None else [])
    return found + [spec.variable for spec in maker.outputs]


def _dump(maker, shared: list, modules: Sequence[str] = ()) -> bytes:
    """The pickled maker and the compile-directory entries of its C modules. Its Apply nodes go first,
    inputs before users: pickling one then meets only nodes already written, so pickle's recursion stays
    shallow however deep the graph is."""
    buffer = io.BytesIO()
    nodes = _ordered_nodes(_graph_variables(maker))
    _Pickler(buffer, [v.container for v in shared]).dump((nodes, maker, list(modules)))
    return buffer.getvalue()


def _load(blob: bytes, shared: list):
    """(maker, module entries) of :func:`_dump`, the maker bound to ``shared``."""
    _, maker, modules = _Unpickler(io.BytesIO(blob), [v.container for v in shared]).load()
    return maker, modules


def _store(path: Path, maker, shared: list, modules: Sequence[str] = ()) -> None:
    """Write the maker under ``path``'s key (readable by this user only), if every shared input it has is one of
    ``shared`` (else it is not the graph we keyed)."""
    containers = {id(v.container) for v in shared}
    if any(i.shared and id(i.value) not in containers for i in maker.inputs):
        log.debug("function cache: a shared input outside the signature; not stored")
        return
    try:
        blob = _dump(maker, shared, modules)
    except Exception as err:  # RecursionError for a very deep graph, or an object pickle refuses
        log.debug("function cache: cannot pickle the function (%s); not stored", err)
        return
    make_private_dir(path.parent)
    entry = ENTRY_MAGIC + path.stem.encode() + b"\n" + blob
    atomic_write(path, lambda tmp: tmp.write_bytes(entry), mode=0o600)
    prune(path.parent)


def prune(directory: Path, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> list[Path]:
    """Remove the least recently used entries beyond ``max_entries`` or ``max_bytes``; return them.

    Example
    -------
    >>> import tempfile, time
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in "abc":
    ...     _ = (d / f"{name}.pkl").write_bytes(b"x" * 10); os.utime(d / f"{name}.pkl", (0, ord(name)))
    >>> [p.name for p in prune(d, max_entries=2)], [p.name for p in prune(d, max_bytes=10)]
    (['a.pkl'], ['b.pkl'])
    """
    entries = []
    for path in directory.glob("*.pkl"):
        try:
            st = path.lstat()
        except FileNotFoundError:  # pruned by another rank meanwhile
            continue
        if stat.S_ISREG(st.st_mode):  # anything else is left alone (cached_function does not use it)
            entries.append((st.st_mtime, st.st_size, path))
    entries.sort(reverse=True)  # newest first
    kept_bytes, removed = 0, []
    for k, (_, size, path) in enumerate(entries):
        kept_bytes += size
        if k >= max_entries or kept_bytes > max_bytes:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def cached_function(inputs: Sequence, outputs, updates=None, mode=None, trust_input: bool = False):
    """``pytensor.function(inputs, outputs, updates=..., mode=..., trust_input=...)``, through the cache.

    Only the C backend (``mode=None``) is cached; other modes, a disabled cache and
    uncacheable graphs compile as usual.
    """
    def compile_here():
        return pytensor.function(list(inputs), outputs, updates=updates, mode=mode, trust_input=trust_input)

    if mode is not None:
        return compile_here()
    use_remembered_march_flags()  # skips pytensor's ~0.4 s g++ probe in every process
    if not is_enabled():
        return compile_here()
    single = not isinstance(outputs, list | tuple)
    try:
        key, shared = graph_signature(list(inputs), [outputs] if single else list(outputs), updates)
    except Uncacheable as why:
        log.debug("function cache: not cached: %s", why)
        return compile_here()
    path = cache_dir() / f"{key}{'-trusted' if trust_input else ''}.pkl"
    try:
        fn = _from_cache(path, shared, len(inputs))
    except UnusableEntry as why:
        log.warning("function cache: %s is not used (%s); compiling without the cache", path, why)
        return compile_here()
    if fn is not None:
        return fn
    fn = compile_here()
    try:
        _store(path, fn.maker, shared, module_dirs(fn))
    except OSError as err:
        log.warning("function cache: cannot write %s (%s)", path, err)
    return fn


def _from_cache(path: Path, shared: list, n_inputs: int):
    """The function stored in ``path``, bound to ``shared``; None when there is none, or when the entry is stale
    or damaged (it is replaced then). :class:`UnusableEntry` for an entry that must not be read."""
    try:
        blob = read_entry(path, path.stem)
    except StaleEntry as why:
        log.warning("function cache: cannot use %s (%s); compiling", path, why)
        return None
    if blob is None:
        return None
    try:
        maker, modules = _load(blob, shared)
        if len(maker.inputs) - sum(1 for i in maker.inputs if i.shared) != n_inputs:
            raise ValueError("the stored function has other inputs")
        usable = preload_modules(modules)  # pytensor then skips reading its whole compile directory
        fn = maker.create()
        if usable < len(modules):  # a module was removed or replaced: store the ones used now
            try:
                _store(path, fn.maker, shared, module_dirs(fn))
            except OSError as err:
                log.warning("function cache: cannot update %s (%s)", path, err)
        os.utime(path)  # recently used: kept longest
        return fn
    except Exception as err:  # a damaged entry: compile again and replace it
        log.warning("function cache: cannot use %s (%s); compiling", path, err)
        path.unlink(missing_ok=True)
        return None
