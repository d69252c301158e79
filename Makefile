# fedvote: `make demo` installs into .venv and runs the main job; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is installed first and pinned: on these machines torch==2.13.0 is a local
# CPU wheel, while an unpinned "torch" would pull several GB of CUDA packages.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test lint bench results install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	$(BIN)/fedvote run

test: install-dev
	$(BIN)/python -m pytest -q

lint: install-dev
	$(BIN)/ruff check src tests
	$(BIN)/mypy

bench: install-dev
	@ls benchmarks/*.py >/dev/null 2>&1 && for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

# Paper reproductions: writes experiments/results/*.json and docs/results.md.
results: install-dev
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/run.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
