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
#: DeprecationWarning naming the new path (``python -m theanompi.recorder RUN_DIR`` still draws a run's plots). An
#: entry maps a module and the modules under it; ``X.*`` only those under X; the longest matching entry wins.
MOVED_PATHS = {
    "theanompi.contract": "theanompi.models.contract",
    "theanompi.params": "theanompi.comm.param_access",
    "theanompi.training": "theanompi.runtime.records",
    "theanompi.recorder": "theanompi.session.recorder",
    "theanompi.models.torch": "theanompi.models.torch_classifier",
    # the layer library: its layers under nn.layers, its other modules beside them
    "theanompi.models.layers": "theanompi.nn",
    "theanompi.models.layers.*": "theanompi.nn.layers.*",
    "theanompi.models.layers.init": "theanompi.nn.init",
    "theanompi.models.layers.nonlinearities": "theanompi.nn.nonlinearities",
    "theanompi.models.layers.objectives": "theanompi.nn.objectives",
    "theanompi.models.layers.regularization": "theanompi.nn.regularization",
    "theanompi.models.layers.updates": "theanompi.nn.updates",
    "theanompi.models.layers.utils": "theanompi.nn.utils",
    # zoo modules named after what they hold, apart from Theano-MPI's paths (models/googlenet.py, ...wgan.py)
    "theanompi.models.zoo.cifar10_cnn": "theanompi.models.zoo.small_cnn",
    "theanompi.models.zoo.googlenet": "theanompi.models.zoo.inception",
    "theanompi.models.zoo.wgan": "theanompi.models.zoo.gans",
}
# first on sys.meta_path: asked before the path finder, which would find theanompi.models.layers.init as a second
# copy of nn/init.py (the alias's parent is theanompi.nn) or a stale theanompi/models/layers/ directory
install(AliasFinder(MOVED_PATHS, on_load=warn_moved), first=True)

__version__ = VERSION
__all__ = ["ASGD", "BSP", "EASGD", "GOSGD"]
