"""Planning a session (in process, nothing started): every model's bad MODEL_* value is refused before any rank
starts, in one line naming the model, the option, the value and what it accepts."""

from __future__ import annotations

import sys

import pytest
from conftest import ASSETS

from theanompi.core.errors import ConfigError
from theanompi.launch.plan import SessionRequest, plan_session
from theanompi.rules import BSP

if str(ASSETS) not in sys.path:
    sys.path.insert(0, str(ASSETS))
import zoo_helpers as zh


@pytest.mark.parametrize("reference", [ref for ref in zh.MODEL_CLASSES if "HyperParams" not in ref])  # ModelClasses
def test_a_bad_model_option_is_refused_at_launch(reference, tmp_path):
    cls = zh.model_class(reference)
    modelfile, _, modelclass = reference.partition(":")
    own = list(cls.option_table.values())[-1]  # the last declared: the model's own, where it has one
    for opt in (cls.option_table["batch_size"], own):
        bad = zh.refused_value(opt.option.parse)
        request = SessionRequest.from_keywords(BSP, ["cpu0"], modelfile, modelclass, model_options={opt.name: bad},
                                               run_dir=str(tmp_path / "never"))
        with pytest.raises(ConfigError) as info:
            plan_session(request)
        assert str(info.value) == (f"{cls.__name__}: model option {opt.name}={bad!r} is not allowed; "
                                   f"use {opt.option.accepts()}")
    assert not (tmp_path / "never").exists()
