# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test services speculators static lint clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the CPU build of torch first (it lies on disk), so nothing later pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m hsstore.demo

# The suite in TEST_PROCESSES processes (pytest-xdist: a 2-core machine's cores, and one for the time tests wait on
# servers and subprocesses), then the tests on a Ray cluster on their own (Ray's actors want the CPUs they are given).
# On a 2-core machine: about 17 and 4 minutes, against 31.5 one after another. The slowest named, so CI's time has names.
TEST_PROCESSES ?= 3

test: $(VENV)/.installed
	$(MAKE) --no-print-directory -j3 --output-sync=target services speculators static
	$(PY) -m pytest -q -m "not gpu and not ray" -n $(TEST_PROCESSES) --durations=25
	$(PY) -m pytest -q -m "ray and not gpu" --durations=5

# What the tests need besides the venv, each idempotent. `test` makes the three side by side: each runs on one core
# at most (pip, apt, mypy), and on a clean machine they took 3.5 minutes one after another.
services:
	scripts/postgres-for-tests.sh  # the machine's Postgres, started if down (the catalog's Postgres tests need it)
	scripts/packages-for-tests.sh  # Debian's Prometheus and Chromium, installed if missing (deploy/, status page)

speculators:
	scripts/speculators-for-tests.sh  # speculators' trainer in an environment of its own, once (its backend test)

static: $(VENV)/.installed
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache  # the layering contracts in pyproject.toml
	$(PY) -m mypy  # the annotations, checked (strict on schemas/ and compute/; pyproject.toml's [tool.mypy])

lint: $(VENV)/.installed
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf .demo
