"""SessionSpec: everything a session's ranks need to know, saved as JSON in the run directory.

The launcher (tmlauncher or ``Rule.init``) builds and validates one spec; every
rank of the session loads it from ``RUN_DIR/session.json``.

Example
-------
>>> from theanompi.core.session_options import BSPOptions
>>> spec = SessionSpec(rule="BSP", devices=["cpu0", "cpu1"],
...                    modelfile="theanompi.models.mlp", modelclass="MLP",
...                    options=BSPOptions(n_epochs=2), model_options={"batch_size": 32})
>>> SessionSpec.from_json(spec.to_json()) == spec
True
>>> SessionSpec.from_json(spec.to_json()).options.sync_type
'cdd'
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from theanompi.core.devices import Device
from theanompi.core.no_follow import read_bounded
from theanompi.core.safe_io import atomic_write_text
from theanompi.core.session_options import SessionOptions, options_of

#: the most a session.json holds (its options and the model's; a larger file is not one theanompi wrote)
SPEC_LIMIT = 16 << 20


@dataclass
class SessionSpec:
    rule: str
    devices: list[str]
    modelfile: str
    modelclass: str
    #: the session's options, parsed once by the launcher (the rule's options class)
    options: SessionOptions = field(default_factory=SessionOptions)
    model_options: dict[str, Any] = field(default_factory=dict)
    #: rank -> role ('worker', 'server', ...) and device string; filled by the rule's launch plan.
    ranks: list[dict[str, str]] = field(default_factory=list)
    cwd: str = ""
    #: what the launch plan chose for the user (e.g. BSP's sync type for a ModelClass without apply_update)
    notes: list[str] = field(default_factory=list)
    #: with RESUME: the epoch (0-based, completed) and iteration of the checkpoint the session continues from (and,
    #: for EASGD, ``worker_iterations``: each worker's steps)
    resume_point: dict[str, Any] | None = None
    #: with RESUME: for each worker, the checkpoint's worker whose state it continues (None: a worker that joins,
    #: started as its rule starts one); None: worker k takes the checkpoint's worker k where there is one
    resume_slots: list[int | None] | None = None
    #: the restart of an elastic session that started this session (the entry of summary.json's "restarts")
    restart: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "options": self.options.to_dict()}, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SessionSpec:
        values = json.loads(text)
        values["options"] = options_of(values["rule"]).from_dict(values.get("options", {}))
        return cls(**values)

    def save(self, path: Path) -> None:
        """Write the spec (never through a link at ``path``)."""
        atomic_write_text(path, self.to_json(), label="RUN_DIR")

    @classmethod
    def load(cls, path: Path, root: Path | None = None) -> SessionSpec:
        """The spec saved at ``path`` (a regular file of at most :data:`SPEC_LIMIT` bytes; below ``root`` reached
        without following a link)."""
        return cls.from_json(read_bounded(path, SPEC_LIMIT, "session spec", root=root).decode())

    @property
    def run_dir(self) -> Path:
        """RUN_DIR (the launch plan always sets it)."""
        if self.options.run_dir is None:
            raise ValueError("the session spec has no RUN_DIR (it was not planned)")
        return Path(self.options.run_dir)


@dataclass(frozen=True)
class RankSpec:
    """One MPI rank of a session: its device and role ('worker', 'server', ...)."""

    device: Device
    role: str

    def describe(self, rank: int) -> str:
        return f"rank {rank} ({self.role} on {self.device})"
