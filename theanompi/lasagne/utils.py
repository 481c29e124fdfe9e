"""``lasagne.utils``: :mod:`theanompi.models.layers.utils` under Lasagne's names.

Example
-------
>>> from theanompi.lasagne import utils
>>> str(utils.floatX(5e-5).dtype) == __import__("pytensor").config.floatX
True
"""

from theanompi.lasagne._unported import unported_names
from theanompi.models.layers.base import create_param
from theanompi.models.layers.utils import *  # noqa: F403
from theanompi.models.layers.utils import __all__ as _ours
from theanompi.models.layers.utils import as_expression

#: Lasagne's name (the expressions are pytensor's).
as_theano_expression = as_expression
__all__ = [*_ours, "as_theano_expression", "create_param"]
__getattr__ = unported_names(__name__, [])
