"""theanompi.multiverso without mpiexec: the API as one plain process, torch tensors, the parameter manager, the
import tree, init's flags. (Under a real mpiexec: tests/sessions/test_multiverso.py.)"""

import subprocess
import sys

import pytest
from conftest import MPI_SCRIPTS, ROOT


def test_single_process_without_mpiexec():
    proc = subprocess.run([sys.executable, str(MPI_SCRIPTS / "check_multiverso.py"), "async"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "multiverso ok (async, 1 workers)" in proc.stdout


def test_torch_tensors_and_dlpack_convert():
    torch = pytest.importorskip("torch")
    from theanompi.multiverso.tables import as_numpy

    t = torch.arange(6, dtype=torch.float32, requires_grad=True)
    out = as_numpy(t * 2)
    assert out.tolist() == [0, 2, 4, 6, 8, 10]


def test_param_manager_finds_every_layer_param():
    """A Lasagne-style layer has a .params dict of its own: the manager must collect the whole net's."""
    import numpy as np

    import theanompi.nn as L
    from theanompi.multiverso.theano_ext.lasagne_ext.param_manager import params_of

    L.init.set_rng(np.random.default_rng(0))
    net = L.DenseLayer(L.DenseLayer(L.InputLayer((None, 4)), 3), 2)
    assert len(params_of(net)) == 4
    assert len(params_of([net])) == 4
    assert len(params_of(L.get_all_params(net))) == 4
    with pytest.raises(TypeError, match="cannot find parameters in int"):
        params_of(3)


# ----- import tree, signatures, flags, docstrings --------------------------------------------------------

def test_multiverso_import_tree_is_one_implementation():
    """`multiverso.X` -> `theanompi.multiverso.X` is the whole port; the short paths are the same objects."""
    import importlib
    import inspect

    import theanompi.multiverso as mv
    from theanompi.multiverso import param_manager as short_pm
    from theanompi.multiverso import sharedvar as short_sv
    from theanompi.multiverso.theano_ext import param_manager as base_pm
    from theanompi.multiverso.theano_ext import sharedvar
    from theanompi.multiverso.theano_ext.lasagne_ext import param_manager as lasagne_pm

    for name in ("init", "shutdown", "barrier", "workers_num", "worker_id", "server_id", "is_master_worker",
                 "ArrayTableHandler", "MatrixTableHandler"):
        assert callable(getattr(mv, name)), name
    assert short_sv.mv_shared is sharedvar.mv_shared and isinstance(sharedvar.mv_shared.shared_vars, list)
    assert short_sv.sync_all_mv_shared_vars is sharedvar.sync_all_mv_shared_vars
    assert short_pm.MVNetParamManager is lasagne_pm.MVNetParamManager
    assert issubclass(lasagne_pm.LasagneParamManager, base_pm.MVModelParamManager)
    assert issubclass(lasagne_pm.MVNetParamManager, lasagne_pm.LasagneParamManager)
    assert list(inspect.signature(lasagne_pm.MVNetParamManager).parameters) == ["network", "is_master_worker"]
    assert list(inspect.signature(lasagne_pm.LasagneParamManager).parameters)[0] == "model"
    assert callable(lasagne_pm.MVNetParamManager.update_all_param)
    assert callable(lasagne_pm.LasagneParamManager.sync_all_param)
    assert list(inspect.signature(mv.MatrixTableHandler.add).parameters) == ["self", "data", "row_ids", "sync"]
    assert list(inspect.signature(mv.MatrixTableHandler.get).parameters) == ["self", "row_ids"]
    assert list(inspect.signature(mv.ArrayTableHandler.add).parameters) == ["self", "data", "sync"]
    assert list(inspect.signature(mv.init).parameters)[0] == "sync"
    keras_ok = importlib.util.find_spec("keras") and importlib.util.find_spec("torch")
    if keras_ok:
        import os

        os.environ.setdefault("KERAS_BACKEND", "torch")
        from theanompi.multiverso import keras_ext
        from theanompi.multiverso.theano_ext.keras_ext import callbacks
        from theanompi.multiverso.theano_ext.keras_ext.param_manager import KerasParamManager

        assert keras_ext.MVCallback is callbacks.MVCallback
        assert issubclass(KerasParamManager, base_pm.MVModelParamManager)
        assert list(inspect.signature(callbacks.MVCallback).parameters) == ["model", "freq"]


def test_init_flags_and_bad_arguments_are_clear():
    from theanompi.multiverso import api

    assert api.parse_flags(["prog", "-sync=false", "-updater_type=default", "-port=55555"]) == \
        {"sync": False, "updater": "add"}
    with pytest.raises(ValueError, match="Multiverso flag '-ma=true' is not supported"):
        api.parse_flags(["-ma=true"])
    with pytest.raises(ValueError, match="write -name=value"):
        api.parse_flags(["-sync"])
    with pytest.raises(ValueError, match="updater='nesterov' is not allowed"):
        api.init(updater="nesterov")
    with pytest.raises(ValueError, match="updater='rmsprop' is not allowed"):
        api.init([b"", b"-updater_type=rmsprop"])
    assert api._state is None


def test_shutdown_twice_is_a_no_op_as_multiverso_s():
    code = ("import theanompi.multiverso as mv\nmv.init()\nmv.shutdown()\nmv.shutdown()\nprint('shut down twice')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "shut down twice" in proc.stdout


# ----- what a Multiverso script expects of its process: pickling, `import lasagne`, floatX --------------------

def _fresh(statement: str) -> str:
    proc = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_mv_shared_variables_pickle_as_multiversos_did():
    """The variable pickles as a plain shared variable; its MVSharedVariable pickles without its table (before, the
    table's communicator made pickle.dump fail: "cannot serialize 'mpi4py.MPI.Intracomm'")."""
    out = _fresh(
        "import pickle, numpy as np\n"
        "import theanompi.multiverso as mv\n"
        "from theanompi.multiverso.theano_ext import sharedvar\n"
        "mv.init()\n"
        "W = sharedvar.mv_shared(value=np.ones((2, 3)), name='W', borrow=True)\n"
        "W.set_value(W.get_value() + 1); sharedvar.sync_all_mv_shared_vars()\n"
        "copy = pickle.loads(pickle.dumps({'W': W}))['W']\n"
        "wrapper = pickle.loads(pickle.dumps(sharedvar.mv_shared.shared_vars[0]))\n"
        "try:\n"
        "    wrapper.mv_sync()\n"
        "except RuntimeError as err:\n"
        "    refused = str(err)\n"
        "mv.shutdown()\n"
        "print(type(copy).__name__, copy.name, copy.get_value().tolist(), 'not pickled with it' in refused)\n")
    assert out == "TensorSharedVariable W [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]] True"


@pytest.mark.parametrize("statement, floatx", [
    ("import theanompi.multiverso; import pytensor", "float64"),  # a Multiverso script: pytensor's own default
    ("import pytensor; import theanompi.multiverso", "float64"),  # Multiverso's examples import theano first
    ("import theanompi.nn; import theanompi.multiverso", "float32"),  # the layers came first: kept
    ("import theanompi; import pytensor", "float32"),  # sessions and the layer library: theanompi's float32
])
def test_multiverso_scripts_keep_pytensors_floatx(statement, floatx):
    assert _fresh(f"{statement}\nimport pytensor\nprint(pytensor.config.floatX)") == floatx


def test_the_users_floatx_wins():
    import os

    statement = "import theanompi.multiverso, pytensor; print(pytensor.config.floatX)"
    proc = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTENSOR_FLAGS": "floatX=float32"})
    assert proc.stdout.strip() == "float32", proc.stderr


def test_import_lasagne_works_after_importing_theanompi_multiverso():
    out = _fresh("import theanompi.multiverso\nimport lasagne\nfrom lasagne.layers import DenseLayer\n"
                 "print(lasagne.__name__, DenseLayer.__module__)")
    assert out == "theanompi.lasagne theanompi.nn.layers.dense"
