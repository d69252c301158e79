# fedvote: `make demo` installs into .venv and runs the main job; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is installed first and pinned: on these machines torch==2.13.0 is a local
# CPU wheel, while an unpinned "torch" would pull several GB of CUDA packages.
TORCH_SPEC ?= torch==2.13.0
# --no-compile: Python compiles what it imports when it first does (torch ships thousands
# of modules a run never loads); halves the install, which make test pays on a fresh clone.
PIP_INSTALL := $(BIN)/python -m pip install --quiet --no-compile
# ...but then, where PYTHONDONTWRITEBYTECODE is set (as on these machines), no bytecode is ever
# cached and every process compiles torch, scipy and dp-accounting from source again (import
# 3.8 s instead of 1.9 s; fedvote --help 0.33 s instead of 0.12 s). Importing what a run, the
# CLI and the tests load, once with bytecode writing on, caches exactly those modules (the
# peers' environments below get the same, so that benchmarks/bench_peers.py compares like with like).
BYTECODE_MODULES := fedvote.runner fedvote.cli.app fedvote.cli.options fedvote.report torch._dynamo \
	torch.optim dp_accounting.pld dp_accounting.rdp scipy.stats scipy.optimize opacus sklearn matplotlib.pyplot
BYTECODE_DEV_MODULES := $(BYTECODE_MODULES) pytest xdist hypothesis flwr opendp
cache_bytecode = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c \
	"import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]" $(1)

.PHONY: demo test test-slow lint bench bench-peers-env results audit install install-dev clean chromium fonts

# The full MNIST/USPS files: ../shared/datasets when it is there (FEDVOTE_DATA overrides).
export FEDVOTE_DATA ?= $(shell [ -d ../shared/datasets ] && cd ../shared/datasets && pwd)
# Two workers, one test file each at a time (module fixtures are built once per file).
PYTEST_PARALLEL ?= -n 2 --dist loadfile

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(PIP_INSTALL) $(TORCH_SPEC)
	$(PIP_INSTALL) -e .
	$(call cache_bytecode,$(BYTECODE_MODULES))
	touch $@

# One pip run on a fresh clone (torch first, then fedvote with its dev extras).
$(VENV)/.installed-dev: $(BIN)/python pyproject.toml
	$(PIP_INSTALL) $(TORCH_SPEC)
	$(PIP_INSTALL) -e '.[dev]'
	$(call cache_bytecode,$(BYTECODE_DEV_MODULES))
	touch $(VENV)/.installed $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	$(BIN)/fedvote run

# The report tests screenshot report.html in headless Chromium (Debian's package);
# installed here when missing (needs root or sudo), silent when present.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		echo "installing chromium (apt-get) for the report tests"; \
		$$SUDO $(APT_GET) install -y -qq chromium >/dev/null 2>&1 || \
		{ $$SUDO $(APT_GET) update -qq && $$SUDO $(APT_GET) install -y -qq chromium >/dev/null; }; }

# The synthetic digits domain (fedvote.data.syndigits) renders every TrueType font under
# /usr/share/fonts/truetype: DejaVu and Liberation, plus FreeFont and Lato (Debian's
# fonts-freefont-ttf, fonts-lato) for more digit shapes. Installed here when missing
# (needs root or sudo), silent when present. Another font set gives another (recorded) dataset.
SYNDIGITS_FONTS := dejavu liberation freefont lato
# The package installer of the chromium and fonts targets (tests replace it).
APT_GET ?= apt-get
SYNDIGITS_FONT_PACKAGES := fonts-dejavu-core fonts-liberation fonts-freefont-ttf fonts-lato
fonts:
	@missing=0; for d in $(SYNDIGITS_FONTS); do [ -d /usr/share/fonts/truetype/$$d ] || missing=1; done; \
	[ $$missing -eq 0 ] || { \
		SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		echo "installing $(SYNDIGITS_FONT_PACKAGES) (apt-get) for the synthetic digits"; \
		$$SUDO $(APT_GET) install -y -qq $(SYNDIGITS_FONT_PACKAGES) >/dev/null 2>&1 || \
		{ $$SUDO $(APT_GET) update -qq && $$SUDO $(APT_GET) install -y -qq $(SYNDIGITS_FONT_PACKAGES) >/dev/null; }; }

# The test targets (below) install the fonts too: the syndigits tests render them.
test test-slow: fonts

# make test: everything but the slow and full-data tests, in under 5 minutes on 2 cores.
test: install-dev chromium
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow and not full_data"

# make test-slow: the rest (the real Flower deployments, long accounting grids, full MNIST/USPS); CI runs both.
test-slow: install-dev chromium
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "slow or full_data"

lint: install-dev
	$(BIN)/ruff check src tests
	$(BIN)/mypy

# Each benchmarks/bench_*.py writes benchmarks/results/<name>.json; report.py turns them all into docs/performance.md.
# bench_compute_bound.py runs last: it reads the times teachers.json and peers.json hold (--peers names another).
# bench_peers.py also needs Flower's simulation engine (Ray, fedvote[simulation]) and, for its pfl rows, make bench-peers-env.
bench: install-dev $(VENV)/.installed-simulation
	@for b in $(filter-out %/bench_compute_bound.py,$(wildcard benchmarks/bench_*.py)) benchmarks/bench_compute_bound.py; do echo "== $$b"; FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python $$b || exit 1; done
	$(BIN)/python benchmarks/report.py

$(VENV)/.installed-simulation: $(VENV)/.installed-dev
	$(PIP_INSTALL) -e '.[simulation]'
	$(call cache_bytecode,flwr.simulation ray)
	touch $@

# pfl-research (Apple's FL simulator) for benchmarks/bench_peers.py, in a venv of its own (its pins
# differ from fedvote's): torch pinned first, as above, then pfl with its PyTorch extra.
PEERS_VENV ?= .venv-peers
bench-peers-env: $(PEERS_VENV)/.installed

$(PEERS_VENV)/.installed:
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --no-compile $(TORCH_SPEC)
	$(PEERS_VENV)/bin/python -m pip install --quiet --no-compile "pfl[pytorch]==0.6.0"
	env -u PYTHONDONTWRITEBYTECODE $(PEERS_VENV)/bin/python -c "import torch._dynamo, torch.optim, pfl.algorithm, pfl.privacy"
	touch $@

# Paper reproductions and every method on its defaults: writes experiments/results/* and docs/results.md.
results: install-dev fonts
	$(BIN)/python experiments/defaults_digits.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/student_choice.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/student_width.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/relabeller_steps.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/teacher_choice.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/mnist_command.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/fashion_mnist.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/fashion_mnist_ceiling.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/student_precision.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/query_selection.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/multilabel.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/digits_domains.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/fedaux_ablation.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/voting_mnist_curve.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/fedaux_fdp.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/weighted_voting.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/prifedsync_mnist.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/cifar10_voting.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/cifar10_ceiling.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/cifar10_release_variants.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/projected_votes.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/teacher_variants.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/cifar10_feature_map.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/prifedsync_cifar10.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/fedaux_cifar10.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/gradient_baselines.py
	$(BIN)/python experiments/individual_budgets.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/individual_budgets_mnist.py
	FEDVOTE_DATA=$${FEDVOTE_DATA:-../shared/datasets} $(BIN)/python experiments/run.py

# Privacy audit of every method (fedvote audit): the table in docs/privacy.md, about 15 min on 2 cores.
audit: install-dev
	$(BIN)/python experiments/audit_table.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
