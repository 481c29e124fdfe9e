"""Checkpoints: hickle files written atomically, loaded without unpickling arbitrary objects.

A checkpoint holds, for every worker, its parameters and its model's extra state
(``state_vars``: optimizer velocities, learning rate, ...), plus the rule, the
last completed epoch and the iteration counter (the recorder's position). The
data order needs no state: it is a pure function of (SEED, epoch).

Files: ``CHECKPOINT_DIR/ckpt-epoch-0003.hkl`` (epoch 3 completed) and
``CHECKPOINT_DIR/latest`` naming the newest one; both are replaced by rename,
so a crash never leaves a half-written checkpoint behind.

Example
-------
>>> path = save_checkpoint("runs/x/checkpoints", {"epoch": 0, ...})    # doctest: +SKIP
>>> resolve_checkpoint("runs/x/checkpoints") == path                   # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
from pathlib import Path

from theanompi.core.errors import ConfigError
from theanompi.core.safe_io import UnsafeFileError, atomic_write_text, load_hickle, save_hickle_atomically

log = logging.getLogger("theanompi")

FORMAT = 1
REQUIRED = ("format", "rule", "epoch", "iteration", "n_workers", "worker_params", "worker_state")


def save_checkpoint(directory, payload: dict) -> Path:
    """Write ``payload`` as the checkpoint of epoch ``payload['epoch']``; update ``latest``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = save_hickle_atomically({"format": FORMAT, **payload}, directory / f"ckpt-epoch-{payload['epoch']:04d}.hkl")
    atomic_write_text(directory / "latest", path.name + "\n")
    return path


def resolve_checkpoint(path) -> Path:
    """A checkpoint file, or a checkpoint directory's newest one (ConfigError if there is none)."""
    path = Path(path)
    if path.is_dir():
        latest = path / "latest"
        if not latest.is_file():
            raise ConfigError(f"RESUME={str(path)!r}: the directory holds no checkpoint ('latest' is missing)")
        path = path / latest.read_text().strip()
    if not path.is_file():
        raise ConfigError(f"RESUME={str(path)!r}: no such checkpoint file")
    return path


def load_checkpoint(path) -> dict:
    """The checkpoint's contents, checked for completeness (ConfigError, UnsafeFileError)."""
    path = resolve_checkpoint(path)
    payload = load_hickle(path)
    if not isinstance(payload, dict) or any(k not in payload for k in REQUIRED):
        missing = [k for k in REQUIRED if not isinstance(payload, dict) or k not in payload]
        raise ConfigError(f"RESUME={str(path)!r}: not a theanompi checkpoint (missing {', '.join(missing)})")
    if payload["format"] != FORMAT:
        raise ConfigError(f"RESUME={str(path)!r}: checkpoint format {payload['format']} is not {FORMAT}")
    return payload


def _newest_first(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob("ckpt-epoch-*.hkl"), reverse=True)


def load_newest_intact(path) -> tuple[Path, dict]:
    """(file, payload) of the checkpoint to resume from ``path``, a file or a checkpoint directory.

    For a directory: its newest checkpoint that loads (a damaged newer one is skipped with a
    warning naming it). For a file that does not load: the ConfigError names the newest intact
    checkpoint of the same directory, if there is one. An unsafe file is always refused.

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
            others = [p for p in _newest_first(path.parent) if p != path]
            for other in others:
                try:
                    load_checkpoint(other)
                except ConfigError:
                    continue
                raise ConfigError(f"{err}; the intact checkpoint {str(other)!r} can be resumed instead") from None
            raise
    newest = resolve_checkpoint(path)
    candidates = [newest] + [p for p in _newest_first(path) if p != newest and p.name < newest.name]
    errors = []
    for candidate in candidates:
        try:
            payload = load_checkpoint(candidate)
        except UnsafeFileError:
            raise
        except ConfigError as err:
            errors.append((candidate, err))
            continue
        for skipped, reason in errors:
            log.warning("RESUME=%r: skipped the damaged checkpoint %s (%s); resuming from %s",
                        str(path), skipped, reason, candidate)
        return candidate, payload
    raise errors[0][1]
