# Quick start: `make run` (set up and solve a bundled instance), `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTANCE ?= instances/random-n14-d10-s1.wcsp

.PHONY: run test test-all gpu-test cubins bench clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/activate
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

# The compiled search core, built ahead of time (gpusolve/search/dfbb_build.py), again when its sources
# change; where it cannot be built (no C compiler), searches compile it with numba's JIT instead.
CORE_SOURCES := $(wildcard gpusolve/search/dfbb_*.py) gpusolve/inference/vac_kernels.py

$(VENV)/.core: $(CORE_SOURCES) $(VENV)/.installed
	-$(BIN)/python -m gpusolve.search.dfbb_build
	touch $@

# gpusolve's compiled bytecode, as pip leaves an installed package: an editable install compiles none, and
# where PYTHONDONTWRITEBYTECODE is set (some container images) every process would compile the package
# from source (a solve process on the dev box: cap131 0.36 -> 0.29-0.32 s, warehouse.wcsp 0.22 -> 0.15-0.16 s).
# Again when a source changes.
PY_SOURCES := $(shell find gpusolve/ parsers/ -name '*.py')

$(VENV)/.bytecode: $(PY_SOURCES) $(VENV)/.installed
	$(BIN)/python -m compileall -q gpusolve
	touch $@

run: $(VENV)/.installed $(VENV)/.core $(VENV)/.bytecode
	$(BIN)/gpusolve solve $(INSTANCE)

# What CI runs: every test but those marked slow (see pyproject.toml's markers). `make test-all`
# runs the slow ones too.
test: $(VENV)/.dev-installed $(VENV)/.core $(VENV)/.bytecode
	$(BIN)/python -m pytest -q -m "not slow"

test-all: $(VENV)/.dev-installed $(VENV)/.core $(VENV)/.bytecode
	$(BIN)/python -m pytest -q

# On a machine with a GPU and CuPy: only the gpu-marked tests, with the project's .venv when there
# is one, else $(PYTHON) (a GPU host with cupy, numpy, pytest installed system-wide).
GPU_PYTHON = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

gpu-test:
	$(GPU_PYTHON) -m pytest -q -m gpu

# After a change to the shape-generic kernels' source: their prebuilt cubins (CuPy's NVRTC, no GPU needed).
cubins:
	$(GPU_PYTHON) -m gpusolve.engines.kernels

clean:
	rm -rf $(VENV) .pytest_cache
