# nash-league: `make run` sets up and runs the default league, `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Ray 2.60 turns token auth on for `ray start`; local development and CI run without it.
# On a real cluster use RAY_AUTH_MODE=token with the cluster's token (docs/cluster.md).
export RAY_AUTH_MODE ?= disabled
# Serve's settings for a league (serve/environment.py), for the Rays `make` starts.
export RAY_SERVE_THROUGHPUT_OPTIMIZED ?= 1
export RAY_SERVE_ENABLE_DIRECT_INGRESS ?= 0
# One BLAS thread: on two shared cores, threaded OpenBLAS makes the Nash LP ~10x slower.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: setup run test test-fast lint-imports bench monitor monitor-info prometheus browser test-setup test-packages clean

# Python writes the bytecode of what it imports, even where the environment says not to (many CI
# images set PYTHONDONTWRITEBYTECODE): each module is then compiled once, by the first process that
# imports it (the launcher, before its Ray workers start), not again by every Ray worker, and the
# set-up compiles nothing ahead (all of site-packages took 40 s on two cores: docs/results.md, "The
# test suite's time").
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install --no-compile -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(PY) -m actors.launch $(ARGS)

# The tests that start Ray run one after another (one local Ray at a time); the tests that start no
# Ray run beside them in two processes, in a session whose autogroup is at nice 15, so that they
# take the cores the leagues leave idle and little else (tests/halves.py; one after the other where the kernel
# has no autogroups). Either half may select nothing when PYTEST_ARGS names tests of the other kind;
# both selecting nothing (exit code 5) fails. The venv and the Debian packages the tests need are
# set up side by side.
test: test-setup lint-imports
	@$(PY) tests/halves.py $(PYTEST_ARGS)

test-fast: setup lint-imports
	$(PY) -m pytest -q -n auto -m "not ray and not slow" $(PYTEST_ARGS)

# The layers' contracts (pyproject's [tool.importlinter]; docs/architecture.md): a wrong arrow fails.
lint-imports: setup
	$(VENV)/bin/lint-imports

# What `make test` needs before its checks: the venv and, beside it, the Debian packages.
test-setup:
	@$(MAKE) --no-print-directory -j 2 --output-sync=target setup test-packages

# Debian's packages: $(call apt,PACKAGES) installs them.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
apt = $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(1)
HAS_PROMETHEUS = command -v prometheus >/dev/null 2>&1
HAS_BROWSER = { command -v chromium && command -v chromedriver; } >/dev/null 2>&1

# Debian's Prometheus (the monitoring test scrapes a real league with it).
prometheus:
	@$(HAS_PROMETHEUS) || { $(call apt,prometheus); }

# Debian's headless Chromium and its WebDriver (the league page test drives them with Selenium).
browser:
	@$(HAS_BROWSER) || { $(call apt,chromium chromium-driver); }

# Both of the above for `make test`, in one apt run.
test-packages:
	@missing=""; $(HAS_PROMETHEUS) || missing="prometheus"; $(HAS_BROWSER) || missing="$$missing chromium chromium-driver"; \
	[ -z "$$missing" ] || { $(call apt,$$missing); }

# Prometheus on 127.0.0.1:$(PROMETHEUS_PORT) scraping the league that `make run` (or a `ray job submit`
# on this head node) runs: it finds it through the file the launcher keeps current (monitoring/prometheus/README.md).
PROMETHEUS_PORT ?= 9090
PROMETHEUS_TARGETS := /tmp/nash-league/prometheus_targets.json
GRAFANA_DIR := $(CURDIR)/monitoring/grafana
monitor: prometheus monitor-info
	@mkdir -p runs/prometheus $(dir $(PROMETHEUS_TARGETS))
	@[ -e $(PROMETHEUS_TARGETS) ] || echo '[]' > $(PROMETHEUS_TARGETS)
	@if $(PYTHON) -c 'import socket, sys; sys.exit(socket.socket().connect_ex(("127.0.0.1", $(PROMETHEUS_PORT))) != 0)'; then \
		echo "nash-league: 127.0.0.1:$(PROMETHEUS_PORT) is taken (Debian's own prometheus service? sudo systemctl stop prometheus), or use another port: make monitor PROMETHEUS_PORT=9091" >&2; exit 1; fi
	exec prometheus --config.file=monitoring/prometheus/prometheus.yml --storage.tsdb.path=runs/prometheus \
		--web.listen-address=127.0.0.1:$(PROMETHEUS_PORT)

monitor-info:
	@echo "nash-league: Prometheus at http://127.0.0.1:$(PROMETHEUS_PORT) (try ray_league_pool_size), targets from $(PROMETHEUS_TARGETS)"
	@echo "nash-league: Grafana provisioning in $(GRAFANA_DIR)/provisioning, dashboards in $(GRAFANA_DIR)/dashboards"
	@echo "nash-league: with Grafana installed, start it in another terminal, then open http://localhost:3000 (admin/admin):"
	@echo "  GF_PATHS_PROVISIONING=$(GRAFANA_DIR)/provisioning NASH_LEAGUE_DASHBOARDS=$(GRAFANA_DIR)/dashboards GF_PATHS_DATA=$(CURDIR)/runs/grafana GF_PATHS_LOGS=$(CURDIR)/runs/grafana/log GF_PATHS_PLUGINS=$(CURDIR)/runs/grafana/plugins grafana server --homepath /usr/share/grafana"
	@echo "nash-league: or with Docker:"
	@echo "  docker run --rm --network host -e NASH_LEAGUE_DASHBOARDS=/dashboards -v $(GRAFANA_DIR)/provisioning:/etc/grafana/provisioning:ro -v $(GRAFANA_DIR)/dashboards:/dashboards:ro grafana/grafana"

bench: setup
	$(PY) -m bench.nash
	$(PY) -m bench.envs

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
