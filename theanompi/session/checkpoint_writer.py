"""Checkpoints written in a background thread: training waits only for the copy of the parameters.

A rank hands :meth:`CheckpointWriter.save` a payload of host copies (the gathered parameters and state); the file
is written by a thread while training goes on, to a temporary file renamed when complete
(:func:`theanompi.session.checkpoint.save_checkpoint`), so a crash mid-write leaves the previous checkpoint intact.
The next :meth:`~CheckpointWriter.save` (and :meth:`~CheckpointWriter.wait`, at the session's end) first finishes
the write before it and raises its error, if it had one: a full disk still ends the session, naming the file.

Example
-------
>>> import tempfile, numpy as np
>>> writer = CheckpointWriter(tempfile.mkdtemp())
>>> writer.save({"rule": "BSP", "epoch": 0, "iteration": 4, "n_workers": 1, "worker_params": [[np.zeros(2)]],
...              "worker_state": [[]]})
>>> writer.wait().name
'ckpt-epoch-0000.hkl'
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from theanompi.session.checkpoint import save_checkpoint

log = logging.getLogger("theanompi")


class CheckpointWriter:
    """One checkpoint write at a time into ``directory``, each in a thread of its own. ``root``: the directory from
    which ``directory`` is reached without following a link (:func:`theanompi.session.run_dir.owning_root`; default:
    ``directory`` itself), as :func:`~theanompi.session.checkpoint.save_checkpoint` takes it."""

    def __init__(self, directory: str | Path, root: str | Path | None = None):
        self.directory = Path(directory)
        self.root = root
        self._thread: threading.Thread | None = None
        self._written: Path | None = None
        self._error: BaseException | None = None

    def save(self, payload: dict[str, Any]) -> None:
        """Finish the previous write (raising its error), then write ``payload`` in the background."""
        self.wait()
        self._thread = threading.Thread(target=self._write, args=(payload,), name="theanompi-checkpoint",
                                        daemon=True)
        self._thread.start()

    def _write(self, payload: dict[str, Any]) -> None:
        try:
            self._written = save_checkpoint(self.directory, payload, root=self.root)
            log.info("checkpoint: %s", self._written)
        except BaseException as err:  # handed to the training thread by wait()
            self._error = err

    def wait(self) -> Path | None:
        """Finish the write in progress; return the last checkpoint written (None before any); raise the error a
        write met."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        return self._written
