"""theanompi: data-parallel training of PyTensor models over MPI.

>>> from theanompi import BSP
>>> rule = BSP()
>>> rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP")  # doctest: +SKIP
>>> rule.wait()  # doctest: +SKIP
0
"""

from theanompi.backend import ensure_pytensor_configured

ensure_pytensor_configured()  # before or after `import pytensor`: the C backend with BLAS, the shared cache

from theanompi.rules import ASGD, BSP, EASGD, GOSGD  # noqa: E402

__version__ = "0.1.0"
__all__ = ["ASGD", "BSP", "EASGD", "GOSGD"]
