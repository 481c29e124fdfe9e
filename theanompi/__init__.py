"""theanompi: data-parallel training of PyTensor models over MPI.

>>> from theanompi import BSP
>>> rule = BSP()
>>> rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP")  # doctest: +SKIP
>>> rule.wait()  # doctest: +SKIP
0
"""

from theanompi.backend.pytensor_config import ensure_pytensor_configured

ensure_pytensor_configured()  # before or after `import pytensor`: the C backend with BLAS, the shared cache

from theanompi.core.module_alias import AliasFinder, install, warn_moved  # noqa: E402
from theanompi.core.version import VERSION  # noqa: E402
from theanompi.launch.handles import ASGD, BSP, EASGD, GOSGD  # noqa: E402

#: Import paths that 0.1's README documented and that moved since: each still gives the module it moved to, with a
#: DeprecationWarning naming the new path (``python -m theanompi.recorder RUN_DIR`` still draws a run's plots).
MOVED_PATHS = {
    "theanompi.contract": "theanompi.models.contract",
    "theanompi.params": "theanompi.comm.param_access",
    "theanompi.training": "theanompi.runtime.records",
    "theanompi.recorder": "theanompi.session.recorder",
    "theanompi.models.torch": "theanompi.models.torch_classifier",
}
install(AliasFinder(MOVED_PATHS, on_load=warn_moved))

__version__ = VERSION
__all__ = ["ASGD", "BSP", "EASGD", "GOSGD"]
