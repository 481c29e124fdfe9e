"""What a session resumed from a checkpoint takes over from it at another number of workers, or on other devices:
which of the checkpoint's workers each worker continues, and BSP's batch.

Both a manual ``RESUME`` and an elastic restart (:mod:`theanompi.launch.elastic`) come through here, at launch:

* **worker slots** (:func:`resume_slots`): a worker continues the checkpoint's worker that ran on the same device;
  the other workers take the checkpoint's remaining workers in order while there are any (a replaced host's
  workers continue the lost ones' state); the rest join (their rule starts them from the workers' common model:
  :meth:`theanompi.runtime.worker_loop.WorkerLoop.resumed_state`);
* **BSP's global batch** (:func:`bsp_batch`): with ``LR_SCALING=none`` the global batch is kept -- each worker's
  ``MODEL_BATCH_SIZE`` becomes the checkpoint's global batch over the new number of workers -- so the steps after
  the restart are the uninterrupted run's; with ``LR_SCALING=linear`` (or ``sqrt``) each worker's batch is kept and
  the learning rate follows the number of workers (the linear or square-root scaling rule).

The rules' own state at another number of workers (BSP's consensus, EASGD's centre and alpha, GOSGD's weights,
ASGD's table) is restored by the ranks.

Example
-------
>>> resume_slots(["cpu0", "cpu1", "cpu2"], ["cpu0", "cpu2"])
[0, 2]
>>> resume_slots(["cpu0", "cpu2"], ["cpu0", "cpu1", "cpu2"])
[0, None, 1]
>>> bsp_batch(total=96, n_workers=2)
(48, 'MODEL_BATCH_SIZE=48: the checkpoint global batch of 96 over 2 workers (LR_SCALING=none keeps it)')
"""

from __future__ import annotations

from typing import Any

from theanompi.core.devices import Device, parse_devices


def _key(device: Device) -> tuple[str, str, int]:
    return ("" if device.is_local else device.host, device.kind, device.index)


def resume_slots(saved_devices: list[str], devices: list[str]) -> list[int | None]:
    """For each of ``devices`` (this session's workers, in order), the index of the checkpoint's worker it
    continues (``saved_devices``: the checkpoint's workers' devices), or None: it joins."""
    saved = [_key(d) for d in parse_devices(saved_devices)] if saved_devices else []
    keys = [_key(d) for d in parse_devices(devices)]
    slots: list[int | None] = [saved.index(k) if k in saved else None for k in keys]
    orphans = iter(i for i in range(len(saved)) if i not in slots)
    return [slot if slot is not None else next(orphans, None) for slot in slots]


def bsp_batch(total: int, n_workers: int) -> tuple[int, str]:
    """Each worker's batch that keeps a checkpoint's global batch ``total`` over ``n_workers`` (rounded down, at
    least 1), and the launch line's note.

    >>> bsp_batch(total=96, n_workers=5)[1]
    'MODEL_BATCH_SIZE=19: the checkpoint global batch of 96 over 5 workers (95: it does not divide)'
    """
    batch = max(1, total // n_workers)
    why = "(LR_SCALING=none keeps it)" if batch * n_workers == total else f"({batch * n_workers}: it does not divide)"
    return batch, f"MODEL_BATCH_SIZE={batch}: the checkpoint global batch of {total} over {n_workers} workers {why}"


def adapt_to_checkpoint(rule: str, payload: dict[str, Any], worker_devices: list[str], lr_scaling: str,
                        model_options: dict[str, Any], model_has_batch_size: bool
                        ) -> tuple[list[int | None], dict[str, Any], list[str], int]:
    """(the workers' slots, the model options, notes for the launch line, the global batch the session keeps: 0
    for none) of a session of ``rule`` on ``worker_devices`` resuming ``payload``. The global batch a checkpoint
    kept (``global_batch``) is kept again, so that restarts at numbers of workers it does not divide never drift."""
    saved_devices = [str(d) for d in payload.get("worker_devices") or []]
    if not saved_devices:  # a checkpoint of an older theanompi: the same worker index
        n_saved = int(payload["n_workers"])
        slots: list[int | None] = [k if k < n_saved else None for k in range(len(worker_devices))]
    else:
        slots = resume_slots(saved_devices, worker_devices)
    notes: list[str] = []
    n_saved, saved_batch = int(payload["n_workers"]), int(payload.get("batch_size") or 0)
    total = int(payload.get("global_batch") or saved_batch * n_saved)
    if rule != "BSP" or lr_scaling != "none" or not saved_batch or not model_has_batch_size:
        return slots, model_options, notes, 0
    if n_saved != len(worker_devices):
        batch, note = bsp_batch(total, len(worker_devices))
        return slots, {**model_options, "batch_size": batch}, [note], total
    same_batch = model_options.get("batch_size", saved_batch) == saved_batch
    return slots, model_options, notes, total if same_batch else 0
