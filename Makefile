# nash-league: `make run` sets up and runs the default league, `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Ray 2.60 turns token auth on for `ray start`; local development and CI run without it.
# On a real cluster use RAY_AUTH_MODE=token with the cluster's token (docs/cluster.md).
export RAY_AUTH_MODE ?= disabled
export RAY_SERVE_THROUGHPUT_OPTIMIZED ?= 1

.PHONY: setup run test test-fast bench monitor clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(PY) -m actors.launch $(ARGS)

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not ray and not slow" $(PYTEST_ARGS)

bench: setup
	$(PY) -m bench.nash
	$(PY) -m bench.envs

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
