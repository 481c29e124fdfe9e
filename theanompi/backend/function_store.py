"""The function cache's store on disk: entries of pickled compiled functions, read back bound to a graph's
shared variables, and pruned.

``<cache dir>/functions/<key>.pkl`` (:func:`cache_dir`) holds a function's
``FunctionMaker`` after pytensor's rewrites, with the compile-directory entries of
its C modules. An entry is :data:`ENTRY_MAGIC`, its key, then the pickle
(:func:`store_function`, written atomically, readable by this user only).

The shared variables are not stored: :func:`pickle_function` writes their
containers as references to their position in the graph, and
:func:`unpickle_function` binds them to the containers of the graph being
compiled, so the loaded function reads and updates the model's own parameters. It
reads with the safe loader, resolving only what a compiled graph names
(:mod:`theanompi.backend.graph_pickles`).

The store is trusted like pytensor's compile directory: it lives in the user's own
cache directory, used only when that directory and everything in it is the user's
and writable by nobody else (:func:`theanompi.backend.pytensor_config.cache_root`).
:func:`read_entry` reads an entry only if it is a regular file of the user's
(:class:`UnusableEntry` otherwise: a directory, FIFO or link is left alone) that
names the key it was stored under (:class:`StaleEntry` otherwise: another graph's,
an older format, damaged). :func:`prune` keeps the most recently used
:data:`MAX_ENTRIES` entries, :data:`MAX_BYTES` in all.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt, tempfile
>>> w = pytensor.shared(np.float32(2.0), name="w")
>>> x = pt.scalar("x", dtype="float32")
>>> f = pytensor.function([x], x * w)
>>> path = Path(tempfile.mkdtemp()) / "functions" / "k.pkl"
>>> store_function(path, f.maker, [w])
>>> w2 = pytensor.shared(np.float32(3.0), name="w")
>>> maker, modules = unpickle_function(read_entry(path, "k"), [w2])
>>> float(maker.create()(np.float32(2.0)))     # bound to w2
6.0
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from pytensor.graph.destroyhandler import DestroyHandler
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.utils import Scratchpad

from theanompi.backend.graph_pickles import graph_unpickler
from theanompi.backend.graph_signature import ordered_nodes
from theanompi.backend.pytensor_config import cache_root
from theanompi.core.private_paths import make_private_dir, untrusted_entry
from theanompi.core.safe_io import atomic_write

log = logging.getLogger(__name__)

#: entries kept: the oldest beyond this many are removed when one is added
MAX_ENTRIES = 200
#: and at most this many bytes in all
MAX_BYTES = 512 * 1024 * 1024
#: an entry's first line (then its key, then the pickle); another first line is an older format
ENTRY_MAGIC = b"theanompi function cache 2\n"
#: the persistent id of the shared container at position k: (SHARED_CONTAINER, k)
SHARED_CONTAINER = "shared-container"


def cache_dir() -> Path:
    """Where the functions are kept: ``<THEANOMPI_CACHE_DIR or ~/.cache/theanompi>/functions`` (see
    :func:`theanompi.backend.pytensor_config.cache_root`)."""
    return cache_root() / "functions"


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
    theanompi.backend.function_store.StaleEntry: it holds the function of another graph (k)
    >>> os.mkfifo(d / "f.pkl"); read_entry(d / "f.pkl", "f")
    Traceback (most recent call last):
    theanompi.backend.function_store.UnusableEntry: it is a FIFO, not a file
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
        return None if k is None else (SHARED_CONTAINER, k)

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


def _graph_variables(maker) -> list:
    """Every variable the maker refers to: its rewritten graph and the graph it was compiled from."""
    fgraph = maker.fgraph
    found = list(fgraph.outputs) + list(_live_clients(fgraph.clients, fgraph.variables))
    for spec in maker.inputs:
        found += [spec.variable] + ([spec.update] if spec.update is not None else [])
    return found + [spec.variable for spec in maker.outputs]


def pickle_function(maker, shared: list, modules: Sequence[str] = ()) -> bytes:
    """The pickled maker and the compile-directory entries of its C modules, ``shared``'s containers written as
    their positions. Its Apply nodes go first, inputs before users: pickling one then meets only nodes already
    written, so pickle's recursion stays shallow however deep the graph is."""
    buffer = io.BytesIO()
    nodes = ordered_nodes(_graph_variables(maker))
    _Pickler(buffer, [v.container for v in shared]).dump((nodes, maker, list(modules)))
    return buffer.getvalue()


def unpickle_function(blob: bytes, shared: list, packages: Iterable[str] = (), source: str = "<entry>"):
    """(maker, module entries) of :func:`pickle_function`, the maker bound to ``shared``'s containers; read by the
    safe loader (what pytensor, theanompi and ``packages`` define, :mod:`theanompi.backend.graph_pickles`)."""
    references = {(SHARED_CONTAINER, k): v.container for k, v in enumerate(shared)}
    _, maker, modules = graph_unpickler(io.BytesIO(blob), source=source, packages=packages,
                                        references=references).load()
    return maker, modules


def store_function(path: Path, maker, shared: list, modules: Sequence[str] = ()) -> None:
    """Write the maker under ``path``'s key (readable by this user only), if every shared input it has is one of
    ``shared`` (else it is not the graph we keyed), then :func:`prune` the directory."""
    containers = {id(v.container) for v in shared}
    if any(i.shared and id(i.value) not in containers for i in maker.inputs):
        log.debug("function cache: a shared input outside the signature; not stored")
        return
    try:
        blob = pickle_function(maker, shared, modules)
    except Exception as err:  # RecursionError for a very deep graph, or an object pickle refuses
        log.debug("function cache: cannot pickle the function (%s); not stored", err)
        return
    make_private_dir(path.parent)
    entry = ENTRY_MAGIC + path.stem.encode() + b"\n" + blob
    atomic_write(path, lambda f: f.write(entry), mode=0o600)
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
