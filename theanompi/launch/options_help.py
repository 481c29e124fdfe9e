"""``tmlauncher --model-options``: a ModelClass's ``MODEL_*`` options -- cfg key, help, what each accepts, default.

The options of a ModelClass (:func:`model_option_table`), and what becomes of other ``MODEL_*`` keys:

* a class that declares them (:class:`~theanompi.models.model_options.HasModelOptions`: ClassifierModel,
  TorchClassifierModel, the zoo and every subclass): its table, merged along its class hierarchy; any other key
  is refused at launch;
* a class written for Theano-MPI (it has ``reset_iter``): what theanompi reads for it
  (:data:`~theanompi.models.theano_mpi_adapter.THEANO_MPI_OPTIONS`); other keys reach it unchecked;
* any other class: the entries of its plain ``defaults`` dict, if it has one; keys reach it as its own
  ``validate_options`` (if any) lets them.

Example
-------
>>> from theanompi.core.options import model_option, positive_int
>>> from theanompi.models.model_options import HasModelOptions
>>> class Net(HasModelOptions):
...     declared_options = [model_option("width", positive_int, 16, "channels of the first layer")]
...     defaults = {"seed_offset": 0}
>>> print("\\n".join(describe_model_options(Net, "net.py:Net", width=72)))
Net (net.py:Net): 2 model options, set as MODEL_<NAME>=VALUE in the cfg or
model_options={'<name>': value}; any other MODEL_* key is refused at launch
  MODEL_WIDTH         channels of the first layer
                      an integer >= 1; default: 16
  MODEL_SEED_OFFSET   (a plain defaults entry)
                      any value; default: 0
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Mapping
from typing import Any

from theanompi.core.errors import ConfigError
from theanompi.core.options import ModelOption, any_value, model_option
from theanompi.models.model_options import HasModelOptions, OptionTable
from theanompi.models.theano_mpi_adapter import THEANO_MPI_OPTIONS, follows_theanompi_contract

#: the column the help starts in, as argparse's
HELP_COLUMN = 22


def model_option_table(model_cls: type) -> tuple[OptionTable, str]:
    """The options of ``model_cls`` and what becomes of other ``MODEL_*`` keys (see the module docstring)."""
    if issubclass(model_cls, HasModelOptions):
        return model_cls.option_table, "any other MODEL_* key is refused at launch"
    if follows_theanompi_contract(model_cls):
        return THEANO_MPI_OPTIONS, (f"{model_cls.__name__} follows Theano-MPI's contract: it reads its own "
                                    "settings, and other MODEL_* keys reach it unchecked in config.model_options")
    defaults = getattr(model_cls, "defaults", None)
    plain = defaults if isinstance(defaults, Mapping) else {}
    table = OptionTable(model_option(str(name), any_value, value, "") for name, value in plain.items())
    checked = callable(getattr(model_cls, "validate_options", None))
    return table, ("its own validate_options checks MODEL_* keys at launch" if checked
                   else "MODEL_* keys reach it unchecked in config.model_options")


def describe_model_options(model_cls: type, reference: str, width: int | None = None) -> list[str]:
    """The lines ``tmlauncher --model-options`` prints for ``model_cls`` (named ``reference`` = MODELFILE:MODELCLASS),
    wrapped at ``width`` columns (default: the terminal's, at most 120)."""
    width = width or min(120, shutil.get_terminal_size((100, 24)).columns)
    table, others = model_option_table(model_cls)
    count = f"{len(table)} model option{'s' if len(table) != 1 else ''}" if table else "no model options declared"
    head = (f"{model_cls.__name__} ({reference}): {count}, set as MODEL_<NAME>=VALUE in the cfg or "
            f"model_options={{'<name>': value}}; {others}")
    lines = textwrap.wrap(head, width)
    for opt in table.values():
        lines += _option_lines(opt, width)
    return lines


def _option_lines(opt: ModelOption, width: int) -> list[str]:
    """One option as argparse shows a flag: its cfg key, then its help and, below, what it accepts and its default."""
    indent = " " * HELP_COLUMN
    help_text = opt.option.help or "(a plain defaults entry)"
    wrap = textwrap.TextWrapper(width, initial_indent=indent, subsequent_indent=indent)
    body = wrap.wrap(help_text) + wrap.wrap(f"{opt.option.accepts()}; default: {cfg_text(opt.default)}")
    key = f"  {opt.cfg_key}"
    if len(key) + 2 > HELP_COLUMN:
        return [key, *body]
    return [key.ljust(HELP_COLUMN) + body[0][HELP_COLUMN:], *body[1:]]


def cfg_text(value: Any) -> str:
    """A default as a cfg file spells it (``true``, ``0.05``, ``32,64``; ``""`` for an empty text).

    >>> cfg_text(True), cfg_text(0.05), cfg_text(""), cfg_text("82,123")
    ('true', '0.05', '""', '82,123')
    """
    if isinstance(value, bool):
        return str(value).lower()
    if value is None or value == "":
        return '""'
    return str(value)


def split_model_reference(reference: str) -> tuple[str, str]:
    """``MODELFILE:MODELCLASS`` -> (MODELFILE, MODELCLASS); ConfigError for anything else.

    >>> split_model_reference("theanompi.models.zoo.resnet:ResNet32")
    ('theanompi.models.zoo.resnet', 'ResNet32')
    >>> split_model_reference("theanompi.models.mlp")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: --model-options 'theanompi.models.mlp' is not MODELFILE:MODELCLASS ...
    """
    modelfile, _, modelclass = reference.rpartition(":")
    if not modelfile.strip() or not modelclass.strip():
        raise ConfigError(f"--model-options {reference!r} is not MODELFILE:MODELCLASS (e.g. "
                          "theanompi.models.zoo.resnet:ResNet32, or examples/softmax_model.py:SoftmaxRegression)")
    return modelfile.strip(), modelclass.strip()
