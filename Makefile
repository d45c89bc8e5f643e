# nash-league: `make run` sets up and runs the default league, `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Ray 2.60 turns token auth on for `ray start`; local development and CI run without it.
# On a real cluster use RAY_AUTH_MODE=token with the cluster's token (docs/cluster.md).
export RAY_AUTH_MODE ?= disabled
export RAY_SERVE_THROUGHPUT_OPTIMIZED ?= 1
# One BLAS thread: on two shared cores, threaded OpenBLAS makes the Nash LP ~10x slower.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: setup run test test-fast bench monitor prometheus clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(PY) -m actors.launch $(ARGS)

test: setup prometheus
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not ray and not slow" $(PYTEST_ARGS)

# Debian's Prometheus (the monitoring test scrapes a real league with it).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus; }

# Prometheus on 127.0.0.1:9090 scraping the local Ray cluster (run a league in another terminal).
monitor: setup prometheus
	mkdir -p runs/prometheus
	prometheus --config.file=monitoring/prometheus/prometheus.yml --storage.tsdb.path=runs/prometheus \
		--web.listen-address=127.0.0.1:9090

bench: setup
	$(PY) -m bench.nash
	$(PY) -m bench.envs

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
