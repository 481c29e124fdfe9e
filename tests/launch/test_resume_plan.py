"""What a resume at another number of workers or on other devices takes over (theanompi.launch.resume_plan)."""

from __future__ import annotations

import pytest

from theanompi.launch.resume_plan import adapt_to_checkpoint, resume_slots


@pytest.mark.parametrize("saved, now, slots", [
    ("cpu0,cpu1,cpu2", "cpu0,cpu1,cpu2", [0, 1, 2]),
    ("cpu0,cpu1,cpu2", "cpu0,cpu2", [0, 2]),            # worker 1 lost: the others keep their own
    ("cpu0,cpu2", "cpu0,cpu2,cpu1", [0, 1, None]),      # one joins
    ("cpu0;node2:cpu0", "cpu0;node3:cpu0", [0, 1]),     # a replaced host continues the lost one's worker
    ("cpu0;node2:cpu0", "cpu0;node3:cpu0,cpu1", [0, 1, None]),
    ("node5:cpu0,cpu1", "node7:cpu0,cpu1", [0, 1]),     # another cluster: in order
])
def test_a_worker_continues_its_own_device_else_a_lost_one_else_joins(saved, now, slots):
    assert resume_slots(saved.split(";") if ";" in saved else [saved], now.split(";") if ";" in now else [now]) \
        == slots


def payload(n, batch=20, **more):
    return {"n_workers": n, "batch_size": batch, "worker_devices": [f"cpu{i}" for i in range(n)], **more}


def test_bsp_keeps_the_global_batch_without_lr_scaling_and_never_drifts():
    slots, options, notes, kept = adapt_to_checkpoint("BSP", payload(3), ["cpu0", "cpu2"], "none",
                                                      {"batch_size": 20, "lr": 0.1}, True)
    assert slots == [0, 2] and options == {"batch_size": 30, "lr": 0.1} and kept == 60
    assert notes == ["MODEL_BATCH_SIZE=30: the checkpoint global batch of 60 over 2 workers (LR_SCALING=none keeps it)"]
    # 3 x 25 over 2 workers is 2 x 37 = 74, but the restart after it keeps 75 again
    _, options, notes, kept = adapt_to_checkpoint("BSP", payload(2, batch=37, global_batch=75), ["cpu0", "cpu1",
                                                  "cpu2"], "none", {"batch_size": 25}, True)
    assert options["batch_size"] == 25 and kept == 75


@pytest.mark.parametrize("rule, scaling, has_batch", [("BSP", "linear", True), ("GOSGD", "none", True),
                                                     ("BSP", "none", False)])
def test_the_batch_is_kept_with_linear_scaling_other_rules_and_models_without_one(rule, scaling, has_batch):
    _, options, notes, kept = adapt_to_checkpoint(rule, payload(3), ["cpu0", "cpu1"], scaling, {"batch_size": 20},
                                                  has_batch)
    assert options == {"batch_size": 20} and notes == [] and kept == 0
