#!/usr/bin/env bash
# Everything issue 12 asks of a GPU, in one command on the offline GPU host (the device tool's machine),
# from the repository root, with the wheels of fetch_wheels.sh carried in .whl/:
#
#   device.run(command="bash tools/gpu/run_on_gpu.sh", carry=[".whl"], timeout_s=600)
#
# A virtualenv that sees the image's packages (torch, jax, cupy, numpy, ...) gets the carried wheels and
# theanompi (editable, so tmlauncher sits beside its python); then the GPU tests and the GPU benchmarks
# run. Logs and JSON go to $OUT (the tool brings them back), else to ./gpu-results.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-results}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
VENV=/tmp/tmpi-venv
export PYTHONUNBUFFERED=1
{
    echo "== machine"; date -u; nvidia-smi -L 2>&1; "$PY" --version
    "$PY" -m venv --system-site-packages "$VENV" || exit 1
    "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl || exit 1
    "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
    "$VENV/bin/python" - <<'PYEOF'
import importlib
for name in ("numpy", "pytensor", "mpi4py", "jax", "cupy", "torch"):
    try:
        mod = importlib.import_module(name)
        print(name, getattr(mod, "__version__", "?"))
    except Exception as err:  # noqa: BLE001 - report whatever is missing, keep going
        print(name, "MISSING:", err)
try:
    import jax
    print("jax devices:", jax.devices())
except Exception as err:  # noqa: BLE001
    print("jax devices: ERROR", err)
from theanompi.core.devices import count_local_gpus
print("theanompi sees GPUs:", count_local_gpus())
PYEOF
} 2>&1 | tee "$OUT/setup.log"
status=0
echo "== GPU tests" | tee "$OUT/tests.log"
"$VENV/bin/python" -m pytest -q -rs --durations=15 tests/launch/test_gpu_launch.py tests/sessions/test_gpu.py \
    tests/backend/test_jax_mode.py tests/sessions/test_jax_session.py 2>&1 | tee -a "$OUT/tests.log"
status=$((status || PIPESTATUS[0]))
echo "== benchmarks" | tee "$OUT/bench.log"
"$VENV/bin/python" benchmarks/device_exchange.py --json "$OUT/device_exchange.json" 2>&1 | tee -a "$OUT/bench.log"
"$VENV/bin/python" benchmarks/jax_step_vs_pure_jax.py --json "$OUT/jax_step.json" 2>&1 | tee -a "$OUT/bench.log"
exit "$status"
