"""The launcher's --model-options: a model's MODEL_* options with their cfg keys, help, values and defaults, for a zoo
model, a Theano-MPI-style model, a user's model with a plain defaults dict, the cfg's model; one line and exit code 2
for a reference that names no ModelClass. (In process: nothing is launched.)"""

from __future__ import annotations

import pytest
from conftest import ASSETS, ROOT

from theanompi.launch.cli import build_parser, main
from theanompi.launch.options_help import cfg_text, model_option_table

PROG = build_parser().prog


def listing(capsys, *argv: str) -> list[str]:
    """The lines --model-options prints (exit code 0, nothing on stderr)."""
    assert main(["--model-options", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def option_block(lines: list[str], cfg_key: str) -> str:
    """The text of one option's entry: its key line and the indented lines under it."""
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [cfg_key])
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 6):
            break
        block.append(line)
    return " ".join(" ".join(block).split())


def test_a_zoo_model_lists_every_option_with_its_default_values_and_help(capsys):
    from theanompi.models.zoo.resnet import ResNet32

    lines = listing(capsys, "theanompi.models.zoo.resnet:ResNet32")
    assert lines[0].startswith("ResNet32 (theanompi.models.zoo.resnet:ResNet32): 21 model options")
    assert "any other MODEL_* key is refused at launch" in " ".join(lines[:3])
    for opt in ResNet32.option_table.values():
        block = option_block(lines, opt.cfg_key)
        assert opt.option.help in block and f"default: {cfg_text(opt.default)}" in block, block
    assert option_block(lines, "MODEL_DATA").endswith("one of: cifar10, synthetic, digits; default: cifar10")
    assert option_block(lines, "MODEL_DEPTH").endswith("6n+2 for n >= 1: 8, 14, 20, 26, ...; default: 32")
    assert option_block(lines, "MODEL_LR_DECAY_EPOCHS").endswith("default: 82,123")


def test_theanompi_style_models_list_what_theanompi_reads_for_them(capsys):
    lines = listing(capsys, str(ASSETS / "theanompi_idiom_models.py") + ":DigitsMLP")
    assert "DigitsMLP follows Theano-MPI's contract" in " ".join(lines[:3])
    assert [line.split()[0] for line in lines if line.startswith("  MODEL_")] == ["MODEL_DATA_DIR"]
    assert "Cifar10_data, ImageNet_data" in option_block(lines, "MODEL_DATA_DIR")
    lines = listing(capsys, "theanompi.models.cifar10:Cifar10_model")  # Theano-MPI's path, on the zoo
    assert option_block(lines, "MODEL_INPUT_SIZE").endswith("default: 28")
    assert option_block(lines, "MODEL_WIDTHS").endswith("a comma list of 3 integers >= 1 such as '16,16,16'; "
                                                         "default: 64,128,64")


def test_a_user_model_with_plain_defaults_lists_them(capsys, tmp_path):
    model = tmp_path / "user_model.py"
    model.write_text(
        "from theanompi.core.options import predicate_parser\n"
        "from theanompi.models.mlp import MLP\n\n\n"
        "class Tuned(MLP):\n"
        "    defaults = {**MLP.defaults, 'hidden': 64, 'label_smoothing': 0.0, 'tag': 'x'}\n"
        "    checks = {'label_smoothing': predicate_parser(lambda v: 0 <= v < 1, 'a number in [0, 1)')}\n")
    lines = listing(capsys, f"{model}:Tuned")
    assert option_block(lines, "MODEL_HIDDEN").endswith("default: 64")  # MLP's declaration, the user's default
    assert option_block(lines, "MODEL_LABEL_SMOOTHING") == ("MODEL_LABEL_SMOOTHING (a plain defaults entry) "
                                                            "a number in [0, 1); default: 0.0")
    assert option_block(lines, "MODEL_TAG") == "MODEL_TAG (a plain defaults entry) any value; default: x"
    lines = listing(capsys, str(ASSETS / "contract_models.py") + ":HangsWhere")  # the suite's own user model
    assert option_block(lines, "MODEL_HANG_RANK") == "MODEL_HANG_RANK (a plain defaults entry) any value; default: 1"


def test_without_a_reference_the_cfg_s_model_is_listed(capsys, tmp_path, monkeypatch):
    cfg = tmp_path / "s.cfg"
    cfg.write_text("RULE=BSP\nMODELFILE=theanompi.models.mlp\nMODELCLASS=MLP\nDEVICES=cpu0\nMODEL_HIDDEN=32\n")
    monkeypatch.chdir(tmp_path)
    assert main(["-cfg", str(cfg), "--model-options"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("MLP (theanompi.models.mlp:MLP): 6 model options")
    assert option_block(lines, "MODEL_HIDDEN").endswith("default: 256")
    assert main(["-cfg", str(cfg), "--modelclass", "ClassifierModel", "--modelfile", "theanompi.models.base",
                 "--model-options"]) == 0  # the command line's overrides apply, as for a session
    assert capsys.readouterr().out.startswith("ClassifierModel (theanompi.models.base:ClassifierModel): 5 model")


@pytest.mark.parametrize("reference, message", [
    ("theanompi.models.mlp", "--model-options 'theanompi.models.mlp' is not MODELFILE:MODELCLASS"),
    ("theanompi.models.mlp:NoSuchModel", "MODELCLASS='NoSuchModel': module 'theanompi.models.mlp' has no such class"),
    ("no/such/model.py:Net", "MODELFILE='no/such/model.py': no such file"),
    ("theanompi.no_such_module:Net", "MODELFILE='theanompi.no_such_module': no module named"),
    ("theanompi.models.mlp:M L P", "MODELCLASS='M L P' must be a class name"),
    ("theanompi.models.data.base:ArraySpec", "ModelClass 'ArraySpec' lacks method 'compile_iter_fns'"),
])
def test_a_reference_naming_no_model_class_is_one_line_and_exit_2(capsys, reference, message):
    assert main(["--model-options", reference]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"{PROG}: error: ") and message in err, err


def test_without_a_reference_the_cfg_is_required(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--model-options"])
    assert info.value.code == 2
    assert "the following arguments are required: -cfg/--config" in capsys.readouterr().err


def test_every_model_of_the_repository_has_a_table():
    """The zoo, ClassifierModel and the examples' models: each gives its options (none is left out)."""
    from theanompi.models.loader import load_model_class

    examples = [("examples/softmax_model.py", "SoftmaxRegression"), ("theanompi.models.mlp", "MLP")]
    for modelfile, modelclass in examples:
        table, others = model_option_table(load_model_class(modelfile, modelclass, str(ROOT)))
        assert others and (modelclass == "SoftmaxRegression") == (len(table) == 0)
