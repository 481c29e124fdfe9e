"""Checkpoints: hickle files written atomically, loaded without unpickling arbitrary objects.

A checkpoint holds, for every worker, its parameters and its model's extra state
(``state_vars``: optimizer velocities, learning rate, ...), plus the rule, the
last completed epoch and the iteration counter (the recorder's position). The
data order needs no state: it is a pure function of (SEED, epoch).

Files: ``CHECKPOINT_DIR/ckpt-epoch-0003.hkl`` (epoch 3 completed),
``CHECKPOINT_DIR/ckpt-epoch-0004-at-000000640.hkl`` (CHECKPOINT_EVERY_ITERS: epoch 4 in progress, 640 of its
samples -- units, :mod:`theanompi.models.data.base` -- consumed; the newest two of these are kept) and
``CHECKPOINT_DIR/latest`` naming the newest one; both are replaced by rename,
so a crash never leaves a half-written checkpoint behind (the temporary file a
killed writer leaves is removed by the next save). Nothing below the directory's
root is written or read through a link (:mod:`theanompi.core.no_follow`). Resuming
from a directory takes the checkpoint ``latest`` names -- never a file outside the
directory -- or, when ``latest`` is missing, empty or names nothing there, the
newest intact checkpoint, saying so; ``latest`` and the checkpoints must be regular
files (a FIFO, a device or a link is refused in one line: it would block, never end,
or lead out of the directory). A checkpoint's fields are checked when it is loaded.

Example
-------
>>> path = save_checkpoint("runs/x/checkpoints", {"epoch": 0, ...})    # doctest: +SKIP
>>> resolve_checkpoint("runs/x/checkpoints") == path                   # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.no_follow import Folder, UnexpectedEntry, describe_entry, read_bounded
from theanompi.core.safe_io import (
    atomic_write_text,
    save_hickle_atomically,
    temporary_path,  # noqa: F401 (docstring example)
)
from theanompi.core.safe_load import UnsafeFileError, load_hickle

log = logging.getLogger("theanompi")

FORMAT = 1
REQUIRED = ("format", "rule", "epoch", "iteration", "n_workers", "worker_params", "worker_state")
_CHECKPOINT_NAME = re.compile(r"^ckpt-epoch-(\d+)(?:-at-(\d+))?\.hkl$")
#: the temporary files of atomic writes into a checkpoint directory (safe_io.temporary_path), with the writer's pid
_TEMPORARY_NAME = re.compile(r"^\.(?:ckpt-epoch-\d+(?:-at-\d+)?|latest)\.tmp(\d+)(?:\.hkl)?$")
#: the most ``latest`` holds (one checkpoint's name)
LATEST_LIMIT = 4096
#: mid-epoch checkpoints kept (the newest ones; epoch-end checkpoints are all kept)
KEEP_MID_EPOCH = 2


def checkpoint_path(directory, epoch: int, epoch_units: int = 0) -> Path:
    """Where the checkpoint taken after ``epoch`` (completed; -1: none yet) goes, ``epoch_units`` units into the next.

    >>> checkpoint_path("ckpts", 3).name, checkpoint_path("ckpts", -1, epoch_units=640).name
    ('ckpt-epoch-0003.hkl', 'ckpt-epoch-0000-at-000000640.hkl')
    """
    if epoch_units:
        return Path(directory) / f"ckpt-epoch-{epoch + 1:04d}-at-{epoch_units:09d}.hkl"
    return Path(directory) / f"ckpt-epoch-{epoch:04d}.hkl"


def save_checkpoint(directory, payload: dict, root=None) -> Path:
    """Write ``payload`` as the checkpoint after epoch ``payload['epoch']`` (and ``payload['epoch_units']`` units of
    the next, if any); update ``latest``; keep the newest :data:`KEEP_MID_EPOCH` mid-epoch checkpoints. ``root``: the
    directory from which ``directory`` is reached without following a link (RUN_DIR for the default
    ``RUN_DIR/checkpoints``; default: ``directory`` itself, created with its parents)."""
    directory = Path(directory)
    if root is None or Path(root) == directory:
        directory.mkdir(parents=True, exist_ok=True)
        root = directory
    with Folder.open(root, directory.relative_to(root), create=True, label="CHECKPOINT_DIR") as folder:
        remove_stale_temporaries(folder)
    target = checkpoint_path(directory, int(payload["epoch"]), int(payload.get("epoch_units", 0)))
    path = save_hickle_atomically({"format": FORMAT, **payload}, target, root=root, label="CHECKPOINT_DIR")
    atomic_write_text(directory / "latest", path.name + "\n", root=root, label="CHECKPOINT_DIR")
    with Folder.open(root, directory.relative_to(root), label="CHECKPOINT_DIR") as folder:
        mid_epoch = [p for p in checkpoints_newest_first(folder) if "-at-" in p.name]
        for old in mid_epoch[KEEP_MID_EPOCH:]:
            folder.discard(old.name)  # a link is removed, never followed
    return path


def remove_stale_temporaries(directory) -> list[Path]:
    """Remove the temporary files of checkpoint writes that other processes left (killed while writing);
    return them. One session at a time writes a checkpoint directory (the launcher locks it), and it has
    one writer: a temporary file of another process is stale.

    Example
    -------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = temporary_path(d / "ckpt-epoch-0002.hkl", pid=1).write_bytes(b"half")
    >>> [p.name for p in remove_stale_temporaries(d)], list(d.iterdir())
    (['.ckpt-epoch-0002.tmp1.hkl'], [])
    """
    if not isinstance(directory, Folder):
        with Folder.open(directory, label="CHECKPOINT_DIR") as folder:
            return remove_stale_temporaries(folder)
    removed = []
    for name in directory.names():
        match = _TEMPORARY_NAME.match(name)
        if match and int(match.group(1)) != os.getpid():
            directory.discard(name)  # a link is removed, never followed
            removed.append(directory.path / name)
    return removed


def checkpoint_order(path: Path) -> tuple[int, int] | None:
    """Where in training a checkpoint's file name says it was taken: (the epoch in progress after it, units of that
    epoch consumed); None for another name. Later checkpoints order higher.

    >>> checkpoint_order(Path("ckpt-epoch-0002.hkl")), checkpoint_order(Path("ckpt-epoch-0003-at-000000640.hkl"))
    ((3, 0), (3, 640))
    """
    match = _CHECKPOINT_NAME.match(Path(path).name)
    if not match:
        return None
    if match.group(2) is None:
        return int(match.group(1)) + 1, 0
    return int(match.group(1)), int(match.group(2))


def checkpoints_newest_first(directory) -> list[Path]:
    """The checkpoint files of ``directory`` (a path or an open :class:`Folder`), the latest in training first
    (UnexpectedEntry for one that is not a regular file: a link, a FIFO, a directory)."""
    if not isinstance(directory, Folder):
        try:
            folder = Folder.open(directory, label="RESUME")
        except FileNotFoundError:  # no directory yet: no checkpoint
            return []
        with folder:
            return checkpoints_newest_first(folder)
    found = []
    for name in directory.names():
        order = checkpoint_order(Path(name))
        if order is not None:
            directory.expect(name, directory=False)
            found.append((order, directory.path / name))
    return [p for order, p in sorted(found, reverse=True)]


def check_checkpoint_file(path: Path, inside: bool) -> None:
    """A checkpoint to load must be a regular file: ``inside`` a RESUME directory not even a link (it would lead out
    of the directory); a RESUME file the user names may be a link to a regular file. UnexpectedEntry otherwise."""
    try:
        st = os.lstat(path) if inside else os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"RESUME={str(path)!r}: no such checkpoint file (a link to nothing?)") from None
    if not stat.S_ISREG(st.st_mode):
        via = " (a link to one)" if not inside and path.is_symlink() else ""
        how = describe_entry(path, st) + via
        raise UnexpectedEntry(f"RESUME={str(path)!r} is {how}, not a checkpoint file: remove it, or RESUME another "
                              "checkpoint")


def latest_checkpoint(directory) -> tuple[Path | None, str]:
    """(the checkpoint ``directory/latest`` names, '') or (None, why it names none): missing, empty,
    naming a file that is not there, or a path that is not a checkpoint name of this directory."""
    latest = Path(directory) / "latest"
    try:
        text = read_bounded(latest, LATEST_LIMIT, f"RESUME={str(directory)!r}: 'latest'", root=directory,
                            label="RESUME").decode(errors="replace").strip()
    except FileNotFoundError:
        return None, "'latest' is missing"
    except OSError as err:
        return None, f"'latest' cannot be read ({err.strerror or err})"
    if not text:
        return None, "'latest' is empty"
    if checkpoint_order(Path(text)) is None or Path(text).name != text:
        return None, f"'latest' names {text[:200]!r}, not a checkpoint of this directory"
    path = Path(directory) / text
    if not os.path.lexists(path):
        return None, f"'latest' names {text}, which is not there"
    return path, ""


def resolve_checkpoint(path) -> Path:
    """A checkpoint file, or a checkpoint directory's newest one: the one ``latest`` names, else the highest
    epoch (ConfigError if there is none)."""
    path = Path(path)
    if path.is_dir():
        newest, why = latest_checkpoint(path)
        if newest is None:
            found = checkpoints_newest_first(path)
            if not found:
                raise ConfigError(f"RESUME={str(path)!r}: the directory holds no checkpoint ({why})")
            newest = found[0]
        check_checkpoint_file(newest, inside=True)
        return newest
    if not os.path.lexists(path):
        raise ConfigError(f"RESUME={str(path)!r}: no such checkpoint file")
    check_checkpoint_file(path, inside=False)
    return path


def _is_int(value: Any, least: int) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and bool(value >= least)


def check_fields(path, payload: dict) -> None:
    """ConfigError naming the first field of a loaded checkpoint that is not what a checkpoint holds.

    Example
    -------
    >>> check_fields("c.hkl", {"rule": "BSP", "epoch": -1, "iteration": 0, "n_workers": 1,
    ...                        "worker_params": [[]], "worker_state": [[]]})
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: RESUME='c.hkl': the checkpoint's epoch is -1, not an integer >= 0 ...
    """
    n_workers = payload["n_workers"]
    units = payload.get("epoch_units", 0)
    checks = [("rule", isinstance(payload["rule"], str), "a rule's name"),
              ("epoch_units", _is_int(units, 0), "an integer >= 0"),
              ("epoch", _is_int(payload["epoch"], 0) or (_is_int(payload["epoch"], -1) and _is_int(units, 1)),
               "an integer >= 0 (-1 only inside the first epoch)"),
              ("iteration", _is_int(payload["iteration"], 0), "an integer >= 0"),
              ("n_workers", _is_int(n_workers, 1), "an integer >= 1")]
    for name in ("worker_params", "worker_state"):
        value = payload[name]
        checks.append((name, isinstance(value, list) and _is_int(n_workers, 1) and len(value) == n_workers
                       and all(isinstance(v, list) for v in value), "a list of one list per worker"))
    for name, ok, expected in checks:
        if not ok:
            raise ConfigError(f"RESUME={str(path)!r}: the checkpoint's {name} is {str(payload.get(name))[:80]}, not "
                              f"{expected} (a damaged or foreign file)")


def load_checkpoint(path) -> dict:
    """The checkpoint's contents, checked for completeness (ConfigError, UnsafeFileError)."""
    path = resolve_checkpoint(path)
    payload = load_hickle(path)
    if not isinstance(payload, dict) or any(k not in payload for k in REQUIRED):
        missing = [k for k in REQUIRED if not isinstance(payload, dict) or k not in payload]
        raise ConfigError(f"RESUME={str(path)!r}: not a theanompi checkpoint (missing {', '.join(missing)})")
    if payload["format"] != FORMAT:
        raise ConfigError(f"RESUME={str(path)!r}: checkpoint format {payload['format']} is not {FORMAT}")
    check_fields(path, payload)
    return payload


def _intact_elsewhere(err: ConfigError, path: Path) -> ConfigError:
    """``err`` about the file ``path``, naming the newest intact checkpoint of its directory if there is one."""
    for other in checkpoints_newest_first(path.parent):
        if other == path:
            continue
        try:
            load_checkpoint(other)
        except ConfigError:
            continue
        return ConfigError(f"{err}; the intact checkpoint {str(other)!r} can be resumed instead")
    return err


def load_newest_intact(path) -> tuple[Path, dict]:
    """(file, payload) of the checkpoint to resume from ``path``, a file or a checkpoint directory.

    For a directory: the checkpoint ``latest`` names or, when ``latest`` names none, the newest
    checkpoint; a damaged one is skipped for the next older one that loads (a warning names both).
    For a file that does not load: the ConfigError names the newest intact checkpoint of the same
    directory, if there is one. An unsafe file is always refused.

    Example
    -------
    >>> load_newest_intact("runs/x/checkpoints")      # doctest: +SKIP
    theanompi: RESUME: skipped runs/x/checkpoints/ckpt-epoch-0003.hkl (not a readable hickle file ...)
    (PosixPath('runs/x/checkpoints/ckpt-epoch-0002.hkl'), {...})
    """
    path = Path(path)
    if not path.is_dir():
        try:
            return path, load_checkpoint(path)
        except UnsafeFileError:
            raise
        except ConfigError as err:
            raise _intact_elsewhere(err, path) from None
    newest, why = latest_checkpoint(path)
    every = checkpoints_newest_first(path)
    if newest is None:
        if not every:
            raise ConfigError(f"RESUME={str(path)!r}: the directory holds no checkpoint ({why})")
        candidates = every
    else:  # a newer file than 'latest' names was being written when 'latest' was last updated
        newest_order = checkpoint_order(newest) or (0, 0)
        candidates = [newest] + [p for p in every if (checkpoint_order(p) or (0, 0)) < newest_order]
    errors = []
    for candidate in candidates:
        try:
            payload = load_checkpoint(candidate)
        except UnsafeFileError:
            raise
        except ConfigError as err:
            errors.append((candidate, err))
            continue
        if newest is None:
            log.warning("RESUME=%r: %s; resuming from the newest intact checkpoint %s", str(path), why, candidate)
        for skipped, reason in errors:
            log.warning("RESUME=%r: skipped the damaged checkpoint %s (%s); resuming from %s",
                        str(path), skipped, reason, candidate)
        return candidate, payload
    raise errors[0][1]


def _unflatten(flat: Any, like: list[np.ndarray]) -> list[np.ndarray]:
    """A flat buffer split and shaped like the arrays ``like`` (their dtypes too)."""
    flat = np.asarray(flat).ravel()
    bounds = np.cumsum([0] + [p.size for p in like])
    return [flat[a:b].reshape(p.shape).astype(p.dtype) for a, b, p in zip(bounds, bounds[1:], like)]


def final_params(payload: dict) -> list[np.ndarray]:
    """The model a session ends with at this checkpoint: EASGD's centre; GOSGD's consensus (the workers'
    parameters weighted by their gossip weights); else worker 0's parameters (BSP's and ASGD's workers all
    hold the same ones at an epoch's end). With averaged weights (AVERAGE_WEIGHTS=ema) the same of the averages:
    ``average`` (EASGD's centre's, ASGD's table's), else each worker's ``worker_average``.

    Example
    -------
    >>> payload = {"worker_params": [[np.zeros(2)], [np.ones(2)]],
    ...            "worker_rule_state": [{"weight": 0.25}, {"weight": 0.75}]}
    >>> final_params(payload)[0].tolist(), final_params({"worker_params": [[np.zeros((1, 2))]],
    ...                                                  "centre": np.array([3.0, 4.0])})[0].tolist()
    ([0.75, 0.75], [[3.0, 4.0]])
    >>> final_params({**payload, "worker_average": [{"params": np.full(2, 4.0)}, {"params": np.zeros(2)}]})[0].tolist()
    [1.0, 1.0]
    """
    workers = [[np.asarray(p) for p in params] for params in payload["worker_params"]]
    first = workers[0]
    for key in ("average", "centre"):
        if key in payload:
            return _unflatten(payload[key], first)
    averages = payload.get("worker_average") or []
    if len(averages) == len(workers) and all(isinstance(a, dict) and a.get("params") is not None for a in averages):
        workers = [_unflatten(a["params"], first) for a in averages]
        first = workers[0]
    states = payload.get("worker_rule_state") or []
    weights = [float(s["weight"]) for s in states if isinstance(s, dict) and isinstance(s.get("weight"), float | int)]
    if len(weights) != len(workers) or not sum(weights) > 0:
        return first
    consensus = []
    for i, param in enumerate(first):
        weighted = np.zeros(param.shape, dtype=np.float64)
        for weight, params in zip(weights, workers):
            weighted += weight * params[i]
        consensus.append((weighted / sum(weights)).astype(param.dtype))
    return consensus


def nothing_to_train(resume: str, epochs_done: int, n_epochs: int) -> str:
    """The line that says a resumed session has nothing to train.

    >>> nothing_to_train("ckpts/ckpt-epoch-0001.hkl", 2, 2)     # doctest: +ELLIPSIS
    "RESUME='ckpts/ckpt-epoch-0001.hkl': the checkpoint is at epoch 2 of 2: nothing to train; ..."
    """
    return (f"RESUME={resume!r}: the checkpoint is at epoch {epochs_done} of {n_epochs}: nothing to train; "
            "its model is the final model")


def resume_position(payload: dict) -> tuple[int, int]:
    """(the epoch a session resumed from this checkpoint trains first, units of it already consumed).

    >>> resume_position({"epoch": 2}), resume_position({"epoch": -1, "epoch_units": 640})
    ((3, 0), (0, 640))
    """
    return int(payload["epoch"]) + 1, int(payload.get("epoch_units", 0))


def consensus(payload: dict) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The workers' common model of a checkpoint, for a session resumed at another number of workers: the
    parameters of :func:`final_params` and the optimizer state averaged over the workers that saved one (in
    float64; identical workers' state, BSP ``cdd``'s, comes back bit for bit).

    Example
    -------
    >>> params, state = consensus({"worker_params": [[np.ones(2)], [np.ones(2)]],
    ...                            "worker_state": [[np.zeros(2)], [np.full(2, 2.0)]]})
    >>> params[0].tolist(), state[0].tolist()
    ([1.0, 1.0], [1.0, 1.0])
    """
    params = final_params(payload)
    gossip = any(isinstance(s, dict) and "weight" in s for s in payload.get("worker_rule_state") or [])
    if "centre" not in payload and not gossip:  # BSP, ASGD: their mean (avg's workers differ inside an epoch)
        rows = [[np.asarray(p) for p in ps] for ps in payload["worker_params"]]
        params = _mean(rows) if not all(_same(rows[0], r) for r in rows[1:]) else rows[0]
    states = [[np.asarray(v) for v in row] for row in payload["worker_state"] if len(row)]
    return params, (_mean(states) if states else [])


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def _mean(rows: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Element-wise mean over ``rows`` (lists of arrays of the same shapes), in float64, cast back."""
    return [(np.sum([np.asarray(r[i], dtype=np.float64) for r in rows], axis=0) / len(rows)).astype(rows[0][i].dtype)
            for i in range(len(rows[0]))]
