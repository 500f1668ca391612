# Entry points; those that run code first create/refresh .venv (instant when it is up to date).
PY := .venv/bin/python
PYVER ?= 3.12
WHEELHOUSE ?=
GPU_CHECK_OUT ?= outputs/gpu_check.json

# The tested stacks (docs/installation.md): pinned (.venv, the suite's and the demo's),
# prebuilt (.venv-prebuilt: torch 2.1.2, mmcv 2.1.0, numpy 1), fork (.venv-fork: the OneDL
# forks, torch 2.14.1, transformers 5.25). `make env STACK=fork` sets one up.
STACK ?= pinned
STACK_VENV = $(if $(filter pinned,$(STACK)),.venv,.venv-$(STACK))

.PHONY: env demo test test-fast lint docs gpu-check wheelhouse stack-check soak
env:
	STACK=$(STACK) bash tools/misc/setup_env.sh

# What every stack must show (tests/test_stacks/), in that stack's environment.
stack-check:
	STACK=$(STACK) bash tools/misc/setup_env.sh
	bash tools/misc/cpu_malloc.sh $(STACK_VENV)/bin/python -m pytest tests/test_stacks \
		-n 2 --dist loadgroup --durations=10

# Pretrain CvT-13, fine-tune Mask R-CNN and UperNet from it, evaluate, draw (docs/demo.md).
demo:
	STACK=pinned bash tools/misc/setup_env.sh
	bash tools/misc/run_demo.sh

# Three pytest-xdist workers on 2 cores, whole test modules each: the real-slurm module holds
# one worker for about 20 minutes while its jobs mostly wait (paced iterations, time limits),
# and the other two keep both cores busy meanwhile (2026-12-05: 26:57 against 32:33 with two
# workers; memory at most 17.7 GB of 24; docs/benchmarks.md, "The test suite's time").
# xdist's public options: whole modules (loadfile), started in the collection's order (the
# longest modules first, tests/conftest.py), not sorted by their number of tests.
TEST_WORKERS ?= 3
TEST_XDIST = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Under tools/misc/cpu_malloc.sh, as the launchers run training: glibc's malloc reuses large
# freed blocks instead of page-faulting every large tensor afresh (docs/development.md, "Suite
# time"). The tests of the default allocator unset its variables themselves.
test:
	STACK=pinned bash tools/misc/setup_env.sh
	bash tools/misc/cpu_malloc.sh $(PY) -m pytest tests $(TEST_XDIST) --durations=30

# The unit tests only: no end-to-end training or tool runs (marked `slow`).
test-fast:
	STACK=pinned bash tools/misc/setup_env.sh
	bash tools/misc/cpu_malloc.sh $(PY) -m pytest tests $(TEST_XDIST) -m "not slow"

# Faults at random moments (issue 59): FAULTS kills and stops, drawn from SEED, in two-process
# Mask R-CNN and UperNet runs that must end bit-exact (docs/cluster.md; the figure in
# SOAK_OUT/soak.json). 50 faults took 23 minutes on the 2-core machine (2026-12-06).
FAULTS ?= 10
SEED ?= 0
SOAK_OUT ?= work_dirs/soak
soak:
	STACK=pinned bash tools/misc/setup_env.sh
	$(PY) tests/soak.py --faults $(FAULTS) --seed $(SEED) --task both --out $(SOAK_OUT)

# ruff (lint and import order), configured in pyproject.toml; installed by setup_env.sh.
lint:
	STACK=pinned bash tools/misc/setup_env.sh
	$(PY) -m ruff check .
	$(PY) .dev_scripts/check_redefinitions.py

# The docs site: the pages and the API reference from the docstrings, warnings as errors (a
# missing page or #anchor, a docstring that does not parse), into docs/_build/html
# (docs/conf.py; docs/development.md, "Documentation"). Installs the `docs` extra if missing.
docs:
	STACK=pinned bash tools/misc/setup_env.sh
	$(PY) -c 'import sphinx, myst_parser, sphinx_rtd_theme' 2>/dev/null \
		|| $(PY) -m pip install -q -e '.[docs]'
	$(PY) -m sphinx -E -W --keep-going -q -b html -c docs . docs/_build/html

# On a CUDA machine after `make test`: the GPU checks, tests marked `gpu` (tests/test_gpu/), then
# one table of them (tools/analysis_tools/gpu_check.py); without CUDA, a small rehearsal of the
# same tests on the CPU. With WHEELHOUSE=DIR (an offline GPU node with its own CUDA torch) the
# stack is first installed from DIR into .gpu-site. GPU_CHECK_PYTEST adds pytest options
# (GPU_CHECK_PYTEST='-k parity'); the JUnit XML goes beside GPU_CHECK_OUT.
GPU_CHECK_TESTS ?= tests/test_gpu
GPU_CHECK_PYTEST ?=
gpu-check:
	@set -e; start=$$(date +%s); \
	if [ -n "$(WHEELHOUSE)" ]; then \
		bash tools/misc/setup_gpu_node.sh "$(WHEELHOUSE)"; \
		. "$${CVT_MM_GPU_SITE:-.gpu-site}/env.sh"; py=$${PYTHON:-python3}; \
	else \
		bash tools/misc/setup_env.sh; py=$(PY); \
	fi; \
	setup=$$(( $$(date +%s) - start )); junit="$(basename $(GPU_CHECK_OUT)).xml"; \
	mkdir -p "$$(dirname "$$junit")"; rm -f "$$junit"; rc=0; \
	$$py -m pytest $(GPU_CHECK_TESTS) -m gpu -o junit_family=xunit1 --junitxml="$$junit" \
		$(GPU_CHECK_PYTEST) || rc=$$?; \
	$$py tools/analysis_tools/gpu_check.py "$$junit" --out "$(GPU_CHECK_OUT)" \
		--setup-seconds $$setup --pytest-exit $$rc

# Where PyPI is reachable: what `make gpu-check WHEELHOUSE=...` installs on an offline node.
wheelhouse:
	bash tools/misc/make_wheelhouse.sh $(PYVER) $(or $(WHEELHOUSE),wheelhouse)
