"""GPU workers, launch side (no ranks, no GPU needed): CUDA ranks pinned and JAX's memory tamed in the mpiexec
command, and the plan's GPU checks. (GPU sessions under a real mpiexec: tests/sessions/test_gpu.py.)"""

import pytest
from conftest import plan

from theanompi.core.devices import count_local_gpus, parse_devices
from theanompi.core.errors import ConfigError
from theanompi.launch.mpiexec import mpiexec_command
from theanompi.session.spec import RankSpec

N_GPUS = count_local_gpus()


def test_mpiexec_pins_cuda_ranks_and_tames_jax_memory(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")  # a user's own choice wins
    ranks = [RankSpec(d, "worker") for d in parse_devices("cpu0,cuda1")]
    cpu, cuda = " ".join(mpiexec_command(ranks, "s", "none", mpiexec="m", python="p", cpu_count=4)).split(" : ")
    assert "CUDA_VISIBLE_DEVICES=1" in cuda and "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75" in cuda
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=true" in cuda
    assert "CUDA_VISIBLE_DEVICES" not in cpu and "XLA_" not in cpu and "JAX_PLATFORMS=cpu" in cpu


def _plan(**options):
    from theanompi.rules import BSP

    return plan(BSP, modelfile="theanompi.models.mlp", modelclass="MLP", **options)


@pytest.mark.skipif(N_GPUS > 0, reason="this machine has a GPU")
@pytest.mark.parametrize("options, fragment", [
    ({"devices": "cuda0", "exch_strategy": "nccl16"}, "needs CuPy with NCCL; install the [cuda] extra"),
    ({"devices": "cuda0", "exch_strategy": "cudampi"}, "needs CuPy; install the [cuda] extra"),
    ({"devices": "cuda0"}, "'cuda0' needs a CUDA GPU"),
    ({"devices": "node1:cuda0", "compute": "c"}, "COMPUTE='c' runs on the CPU, but 'node1:cuda0' is a GPU"),
    ({"devices": "cpu0", "exch_strategy": "cudampi"}, "needs cuda devices; with cpu devices use: ar, ar16"),
])
def test_gpu_config_errors(options, fragment):
    with pytest.raises(ConfigError) as err:
        _plan(**options)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_remote_cuda_devices_plan_without_local_gpu_libraries():
    spec, _ = _plan(devices="node1:cuda0,cuda1", exch_strategy="nccl32", compute="auto")
    assert spec.options.compute == "auto" and spec.options.exch_strategy == "nccl32"
