# Quick start: `make run` (creates .venv if missing, then the default session) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint bench install clean

$(STAMP): setup.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/tmlauncher -cfg=launch_session.cfg

# lint runs first, so a new violation fails `make test`: ruff ([tool.ruff] in pyproject.toml), the layers of the
# house (import-linter, [tool.importlinter]; ARCHITECTURE.md) and the types (mypy, [tool.mypy])
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q --durations=25 tests

# unit tests only: no mpiexec session, no launcher (marked `mpi` by tests/conftest.py), no long training (`slow`)
test-fast: lint
	$(BIN)/python -m pytest -q --durations=10 -m "not mpi and not slow" tests

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/exchange_vs_mpi4py.py --ranks 2 --json benchmarks/results/exchange_2.json
	$(BIN)/python benchmarks/exchange_vs_mpi4py.py --ranks 4 --json benchmarks/results/exchange_4.json
	$(BIN)/python benchmarks/overhead_one_worker.py
	$(BIN)/python benchmarks/cnn_step_vs_torch.py
	$(BIN)/python benchmarks/conv_vs_torch.py
	$(BIN)/python benchmarks/pool_vs_torch.py
	$(BIN)/python benchmarks/resnet_step_vs_torch.py
	$(BIN)/python benchmarks/idle_threads_ab.py
	$(BIN)/python benchmarks/rules_time_to_accuracy.py
	$(BIN)/python benchmarks/asgd_staleness.py
	$(BIN)/python benchmarks/scaling_vs_ddp.py
	$(BIN)/python benchmarks/torch_bsp_vs_ddp.py
	$(BIN)/python benchmarks/jax_step_vs_pure_jax.py
	$(BIN)/python benchmarks/jax_keras_models.py
	$(BIN)/python benchmarks/device_exchange.py
	$(BIN)/python benchmarks/theanompi_table.py

clean:
	rm -rf runs $(VENV) *.egg-info
