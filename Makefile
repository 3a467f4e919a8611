# attention-ladder. `make help` lists the targets. Every target works as the first command on a fresh
# machine: it creates the venv and installs what is missing. On a machine whose python3 already has a
# CUDA torch, the venv sees that torch (--system-site-packages) instead of installing a CPU one over it.

VENV    ?= .venv
STAMP   := $(VENV)/.installed
# A machine whose python3 already has everything at the pinned versions (the staged H200, see
# ../shared/device/README.md: no package index there) runs the targets with it, installing nothing.
READY   := $(shell python3 -c "import cutlass, torch, rich, tabulate, pytest, sys; sys.exit(cutlass.__version__ != '4.8.1')" 2>/dev/null && echo yes)
ifeq ($(READY),yes)
PY      := python3
LADDER  := python3 -m harness.cli
NEEDS   :=
else
PY      := $(VENV)/bin/python
LADDER  := $(VENV)/bin/ladder
NEEDS   := $(STAMP)
endif
STEP    ?= 01
AGAINST ?=
TORCH_CPU ?= torch==2.13.0

# pytest's workers: one per core (pytest-xdist). Compiles and traced models are shared through build/
# (a step compiles once per build directory), so workers split the work instead of repeating it.
WORKERS ?= auto

.PHONY: help install lint test test-fast test-serial run gpu-test table sass diff selfcheck sanitize writeups toolchain clean
.DEFAULT_GOAL := help

help:                    ## this list
	@echo "attention-ladder: make <target> [STEP=hNN] [AGAINST=hMM] [WORKERS=n]"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):[^#]*## (.*)/  \1\t\2/' | expand -t 16

install: $(NEEDS)        ## the venv (.venv) with every package the CPU or GPU side needs

# The CPU install takes the `model` extra: the bound model compiles stock FA4's kernels on the CPU
# (flash-attn-4, and triton, which FA4's quack imports and the CPU torch lacks). The GPU install
# gets FA4 from `gpu` and triton from its CUDA torch.
$(STAMP): pyproject.toml
	@if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then \
	  echo "CUDA torch found: the venv uses it"; \
	  python3 -m venv --system-site-packages $(VENV) && \
	  $(PY) -m pip install -q -e ".[gpu,sass,test,plot]"; \
	else \
	  echo "no CUDA torch: CPU install ($(TORCH_CPU))"; \
	  python3 -m venv $(VENV) && \
	  $(PY) -m pip install -q "$(TORCH_CPU)" && \
	  $(PY) -m pip install -q -e ".[model,sass,test,plot]"; \
	fi
	@touch $(STAMP)

lint: install            ## ruff (rules and version in pyproject.toml)
	$(PY) -m ruff check .

test: install            ## every test, on every core: CPU compile/SASS proof always, GPU tests where the arch matches
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal

test-fast: install       ## every test but the slow ones (the guarded Blackwell builds), on every core
	$(PY) -m pytest -q -m "not slow" -n $(WORKERS) --dist worksteal

test-serial: install     ## every test in one process (a debugger, or -x on the first failure)
	$(PY) -m pytest -q

run: install             ## the main job: measured table on a GPU; compile/SASS table + recorded results on CPU
	$(LADDER) table

gpu-test: install        ## only the GPU tests (they skip, with reasons, without a matching GPU)
	$(PY) -m pytest -q -m gpu -rs

table: install           ## the ladder table (measured on a GPU; compile/SASS on a CPU)
	$(LADDER) table

sass: install            ## make sass STEP=01 [AGAINST=..]
	$(LADDER) sass $(STEP) $(if $(AGAINST),--against $(AGAINST),)

diff: install            ## make diff STEP=h03 [AGAINST=h02]
	$(LADDER) diff $(if $(AGAINST),$(AGAINST) $(STEP),$(STEP))

selfcheck: install       ## every runnable step at tiny shapes, each in a child with a timeout (GPU)
	$(LADDER) selfcheck

toolchain: install       ## which ptxas builds the kernels here, and which built each recorded result
	$(LADDER) toolchain

RECORD ?=
sanitize: install        ## runnable steps at tiny shapes under each tool [RECORD=results/h200.json] [STEPS=h06,h07]
	$(LADDER) selfcheck --sanitize memcheck $(if $(STEPS),--steps $(STEPS),) $(if $(RECORD),--record $(RECORD),)
	$(LADDER) selfcheck --sanitize racecheck $(if $(STEPS),--steps $(STEPS),) $(if $(RECORD),--record $(RECORD),)
	$(LADDER) selfcheck --sanitize synccheck $(if $(STEPS),--steps $(STEPS),) $(if $(RECORD),--record $(RECORD),)

writeups: install        ## regenerate every generated block, the plot and the timeline pictures
	$(LADDER) writeups

clean:                   ## build outputs (compiles, memo, FA4's build) and pytest's cache
	rm -rf build .pytest_cache
