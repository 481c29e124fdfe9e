"""BSP's outer optimizer and compression options at launch (no ranks): every bad value and every combination that
makes no sense refused in one line naming the key; what was chosen said in the launch notes."""

import pytest
from conftest import ASSETS, plan

from theanompi.core.errors import ConfigError
from theanompi.rules import BSP


def _plan(modelclass="MLP", modelfile="theanompi.models.mlp", **options):
    return plan(BSP, devices="cpu0,cpu1", modelfile=modelfile, modelclass=modelclass, **options)


@pytest.mark.parametrize(("options", "line"), [
    ({"outer_momentum": 1}, "BSP_OUTER_MOMENTUM=1 is not allowed; use a number in [0, 1)"),
    ({"outer_lr": 0}, "BSP_OUTER_LR=0 is not allowed; use a finite number > 0"),
    ({"outer_optimizer": "adam"}, "BSP_OUTER_OPTIMIZER='adam' is not allowed; use one of: none, nesterov"),
    ({"compression": "int8"}, "BSP_COMPRESSION='int8' is not allowed; use one of: none, fp16, bf16, powersgd"),
    ({"powersgd_rank": 0}, "BSP_POWERSGD_RANK=0 is not allowed; use an integer from 1 to 65536"),
    ({"powersgd_start_iter": -1}, "BSP_POWERSGD_START_ITER=-1 is not allowed; use an integer >= 0"),
    ({"outer_optimizer": "nesterov", "sync_type": "cdd"},
     "BSP_OUTER_OPTIMIZER=nesterov steps avg's pseudo-gradients; it needs BSP_SYNC_TYPE=avg (the session's is cdd)"),
    ({"outer_optimizer": "nesterov"},  # the MLP has apply_update: cdd stays the sync type
     "BSP_OUTER_OPTIMIZER=nesterov steps avg's pseudo-gradients; it needs BSP_SYNC_TYPE=avg (the session's is cdd)"),
    ({"sync_type": "avg", "outer_lr": 0.5},
     "BSP_OUTER_LR=0.5 applies to BSP_OUTER_OPTIMIZER=nesterov, but BSP_OUTER_OPTIMIZER=none"),
    ({"outer_momentum": 0.5}, "BSP_OUTER_MOMENTUM=0.5 applies to BSP_OUTER_OPTIMIZER=nesterov, but "
                              "BSP_OUTER_OPTIMIZER=none"),
    ({"compression": "fp16", "powersgd_rank": 4},
     "BSP_POWERSGD_RANK=4 applies to BSP_COMPRESSION=powersgd, but BSP_COMPRESSION=fp16"),
    ({"exch_strategy": "ar16", "powersgd_start_iter": 10},
     "BSP_POWERSGD_START_ITER=10 applies to BSP_COMPRESSION=powersgd, but BSP_COMPRESSION=fp16"),
    ({"avg_at_epoch_end": False},  # the MLP keeps cdd
     "BSP_AVG_AT_EPOCH_END=false skips avg's epoch-end averages; it needs BSP_SYNC_TYPE=avg (the session's is cdd)"),
    ({"avg_at_epoch_end": "sometimes", "sync_type": "avg"},
     "BSP_AVG_AT_EPOCH_END='sometimes' is not allowed; use true or false"),
    ({"exch_strategy": "ar16", "compression": "powersgd"},
     "BSP_COMPRESSION=powersgd with BSP_EXCH_STRATEGY=ar16: ar16 is fp16 compression already (ar with "
     "BSP_COMPRESSION=fp16); use BSP_EXCH_STRATEGY=ar"),
])
def test_a_bad_value_or_combination_is_one_line(options, line):
    with pytest.raises(ConfigError) as err:
        _plan(**options)
    assert str(err.value) == line


def test_what_was_chosen_is_in_the_launch_notes():
    spec, _ = _plan(sync_type="avg", outer_optimizer="nesterov", avg_freq=50, compression="powersgd",
                    powersgd_rank=4, powersgd_start_iter=100)
    assert spec.notes[1:] == ["BSP outer optimizer nesterov (DiLoCo: lr 0.7, momentum 0.9, every 50 local steps and "
                              "at epoch ends)", "BSP compression powersgd (rank 4, from iteration 100)"]
    spec, _ = _plan(sync_type="avg", outer_optimizer="nesterov", avg_freq=500, avg_at_epoch_end=False)
    assert spec.notes[1:] == ["BSP outer optimizer nesterov (DiLoCo: lr 0.7, momentum 0.9, every 500 local steps and "
                              "after the last epoch)"]
    spec, _ = _plan(sync_type="avg", avg_freq=500, avg_at_epoch_end=False)
    assert spec.notes[1:] == ["BSP avg every 500 local steps and after the last epoch, not at other epoch ends "
                              "(validation sees the last average)"]
    spec, _ = _plan(exch_strategy="ar16", compression="fp16")  # ar16 is fp16 compression: saying both is fine
    assert spec.notes[1:] == ["BSP compression fp16"]


def test_a_model_without_apply_update_gets_avg_and_diloco():
    spec, _ = _plan(modelfile=str(ASSETS / "contract_models.py"), modelclass="NoApplyUpdate",
                    outer_optimizer="nesterov")
    assert spec.options.sync_type == "avg" and spec.notes[1].startswith("BSP outer optimizer nesterov")
