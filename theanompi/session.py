"""SessionSpec: everything a session's ranks need to know, saved as JSON in the run directory.

The launcher (tmlauncher or ``Rule.init``) builds and validates one spec; every
rank of the session loads it from ``RUN_DIR/session.json``.

Example
-------
>>> spec = SessionSpec(rule="BSP", devices=["cpu0", "cpu1"],
...                    modelfile="theanompi.models.mlp", modelclass="MLP",
...                    options={"n_epochs": 2}, model_options={"batch_size": 32})
>>> SessionSpec.from_json(spec.to_json()) == spec
True
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from theanompi.safe_io import atomic_write_text


@dataclass
class SessionSpec:
    rule: str
    devices: list[str]
    modelfile: str
    modelclass: str
    options: dict[str, Any] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)
    #: rank -> role ('worker', 'server', ...) and device string; filled by the rule's launch plan.
    ranks: list[dict[str, str]] = field(default_factory=list)
    cwd: str = ""
    #: what the launch plan chose for the user (e.g. BSP's sync type for a ModelClass without apply_update)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SessionSpec:
        return cls(**json.loads(text))

    def save(self, path: Path) -> None:
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> SessionSpec:
        return cls.from_json(Path(path).read_text())

    @property
    def run_dir(self) -> Path:
        return Path(self.options["run_dir"])
