"""Checkpoints: hickle files written atomically, loaded without unpickling arbitrary objects.

A checkpoint holds, for every worker, its parameters and its model's extra state
(``state_vars``: optimizer velocities, learning rate, ...), plus the rule, the
last completed epoch and the iteration counter (the recorder's position). The
data order needs no state: it is a pure function of (SEED, epoch).

Files: ``CHECKPOINT_DIR/ckpt-epoch-0003.hkl`` (epoch 3 completed) and
``CHECKPOINT_DIR/latest`` naming the newest one; both are replaced by rename,
so a crash never leaves a half-written checkpoint behind (the temporary file a
killed writer leaves is removed by the next save). Resuming from a directory
takes the checkpoint ``latest`` names -- never a file outside the directory --
or, when ``latest`` is missing, empty or names nothing there, the newest intact
checkpoint, saying so. A checkpoint's fields are checked when it is loaded.

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
from pathlib import Path
from typing import Any

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.safe_io import (
    atomic_write_text,
    save_hickle_atomically,
    temporary_path,  # noqa: F401 (docstring example)
)
from theanompi.core.safe_load import UnsafeFileError, load_hickle

log = logging.getLogger("theanompi")

FORMAT = 1
REQUIRED = ("format", "rule", "epoch", "iteration", "n_workers", "worker_params", "worker_state")
_CHECKPOINT_NAME = re.compile(r"^ckpt-epoch-(\d+)\.hkl$")
#: the temporary files of atomic writes into a checkpoint directory (safe_io.temporary_path), with the writer's pid
_TEMPORARY_NAME = re.compile(r"^\.(?:ckpt-epoch-\d+|latest)\.tmp(\d+)(?:\.hkl)?$")


def checkpoint_path(directory, epoch: int) -> Path:
    """Where the checkpoint of ``epoch`` goes.

    >>> checkpoint_path("ckpts", 3).name
    'ckpt-epoch-0003.hkl'
    """
    return Path(directory) / f"ckpt-epoch-{epoch:04d}.hkl"


def save_checkpoint(directory, payload: dict) -> Path:
    """Write ``payload`` as the checkpoint of epoch ``payload['epoch']``; update ``latest``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(directory)
    path = save_hickle_atomically({"format": FORMAT, **payload}, checkpoint_path(directory, payload["epoch"]))
    atomic_write_text(directory / "latest", path.name + "\n")
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
    removed = []
    for path in Path(directory).glob(".*.tmp*"):
        match = _TEMPORARY_NAME.match(path.name)
        if match and int(match.group(1)) != os.getpid():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def checkpoint_epoch(path: Path) -> int | None:
    """The epoch in a checkpoint's file name (None for another name)."""
    match = _CHECKPOINT_NAME.match(Path(path).name)
    return int(match.group(1)) if match else None


def checkpoints_newest_first(directory) -> list[Path]:
    """The checkpoint files of ``directory``, the highest epoch first."""
    found = [(checkpoint_epoch(p), p) for p in Path(directory).glob("ckpt-epoch-*.hkl")]
    return [p for epoch, p in sorted(((e, p) for e, p in found if e is not None), reverse=True)]


def latest_checkpoint(directory) -> tuple[Path | None, str]:
    """(the checkpoint ``directory/latest`` names, '') or (None, why it names none): missing, empty,
    naming a file that is not there, or a path that is not a checkpoint name of this directory."""
    latest = Path(directory) / "latest"
    try:
        text = latest.read_text(errors="replace").strip()
    except FileNotFoundError:
        return None, "'latest' is missing"
    except OSError as err:
        return None, f"'latest' cannot be read ({err.strerror or err})"
    if not text:
        return None, "'latest' is empty"
    if checkpoint_epoch(Path(text)) is None or Path(text).name != text:
        return None, f"'latest' names {text[:200]!r}, not a checkpoint of this directory"
    path = Path(directory) / text
    if not path.is_file():
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
        return newest
    if not path.is_file():
        raise ConfigError(f"RESUME={str(path)!r}: no such checkpoint file")
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
    checks = [("rule", isinstance(payload["rule"], str), "a rule's name"),
              ("epoch", _is_int(payload["epoch"], 0), "an integer >= 0"),
              ("iteration", _is_int(payload["iteration"], 0), "an integer >= 0"),
              ("n_workers", _is_int(n_workers, 1), "an integer >= 1")]
    for name in ("worker_params", "worker_state"):
        value = payload[name]
        checks.append((name, isinstance(value, list) and _is_int(n_workers, 1) and len(value) == n_workers
                       and all(isinstance(v, list) for v in value), "a list of one list per worker"))
    for name, ok, expected in checks:
        if not ok:
            raise ConfigError(f"RESUME={str(path)!r}: the checkpoint's {name} is {str(payload[name])[:80]}, not "
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
        candidates = [newest] + [p for p in every if (checkpoint_epoch(p) or 0) < (checkpoint_epoch(newest) or 0)]
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
