"""The user's monitoring path, taken as users take it: the launcher in a subprocess with its default
local Ray (as `make run` starts it), and Debian's Prometheus with the shipped
monitoring/prometheus/prometheus.yml, unedited (only storage and listen address are flags, as
`make monitor` passes them). Every Grafana dashboard expression and every template variable's
query must return data of this run's Ray session, and an earlier run's leftovers must not shadow it."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from conftest import free_port
from monitoring.targets import TARGETS_FILE

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((ROOT / "monitoring/grafana/dashboards").glob("*.json"))
PROVISIONED = yaml.safe_load((ROOT / "monitoring/grafana/provisioning/datasources/prometheus.yaml").read_text())
STALE_TARGET = "127.0.0.1:9"  # discard port: what a crashed earlier run may leave in the targets file


def rate_interval() -> str:
    """Grafana's $__rate_interval at its floor: four scrape intervals of the provisioned data source."""
    step = PROVISIONED["datasources"][0]["jsonData"]["timeInterval"]
    return f"{4 * int(step.rstrip('s'))}s"


def dashboard_exprs(session: str) -> list[str]:
    """Every target expression of every dashboard, with the variables filled in as Grafana would for
    this one session selected."""
    exprs = []
    for path in DASHBOARDS:
        dash = json.loads(path.read_text())
        exprs += [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return [e.replace("$SessionName", session).replace("$__rate_interval", rate_interval()) for e in exprs]


def variable_queries() -> list[str]:
    return [v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            for path in DASHBOARDS for v in json.loads(path.read_text())["templating"]["list"] if v["type"] == "query"]


@pytest.fixture(scope="module")
def league(tmp_path_factory):
    """`make monitor` already running, a crashed run's targets left behind, then `make run`."""
    if shutil.which("prometheus") is None:
        pytest.skip("needs Debian's prometheus (make test installs it)")
    tmp = tmp_path_factory.mktemp("monitoring")
    TARGETS_FILE.parent.mkdir(parents=True, exist_ok=True)
    TARGETS_FILE.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": [STALE_TARGET]}]))
    prom_url = f"http://127.0.0.1:{free_port()}"
    prom = subprocess.Popen(["prometheus", f"--config.file={ROOT / 'monitoring/prometheus/prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address={prom_url[7:]}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    started = time.time()
    launcher = subprocess.Popen([sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml",
                                 f"run.storage={tmp / 'run'}", "run.max_minutes=15"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in launcher.stdout:
            lines.append(line)
            found = re.search(r"metrics of Ray session (\S+) at (.*); Prometheus targets in (\S+)", line)
            if found:
                break
        assert found, "".join(lines)
        # keep draining the launcher's output so it never blocks on a full pipe
        threading.Thread(target=lambda: lines.extend(launcher.stdout), daemon=True).start()
        assert prom.poll() is None, f"prometheus exited: {prom.stderr.read()[-2000:]}"
        yield {"session": found[1], "endpoints": found[2].split(", "), "targets_file": found[3], "prom": prom_url,
               "launcher": launcher, "started": started, "lines": lines}
    finally:
        prom.terminate()
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(timeout=180)
            except subprocess.TimeoutExpired:
                launcher.kill()
        prom.wait(timeout=30)


def query(league, expr: str) -> list:
    body = requests.get(f"{league['prom']}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def test_every_dashboard_query_parses(tmp_path):
    exprs = dashboard_exprs("session_x")
    assert len(exprs) >= 30
    rules = tmp_path / "rules.yml"
    rules.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_prometheus_scrapes_exactly_this_session_with_the_shipped_config(league):
    assert league["targets_file"] == str(TARGETS_FILE)
    assert re.fullmatch(r"[\w-]+", league["session"])  # no regex metacharacters when it fills $SessionName
    deadline = time.time() + 240
    while time.time() < deadline:
        if query(league, f'ray_league_pool_size{{SessionName="{league["session"]}"}}'):
            break
        time.sleep(1)
    first_data = time.time() - league["started"]
    print(f"\nmonitoring: {first_data:.0f} s from launching the league to its first data in Prometheus")
    active = requests.get(f"{league['prom']}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
    assert sorted(t["labels"]["instance"] for t in active) == sorted(league["endpoints"])  # the stale one is gone
    assert STALE_TARGET not in league["endpoints"]
    assert [t["health"] for t in active] == ["up"] * len(active), active


def test_every_dashboard_expression_and_variable_has_data_from_this_run(league):
    exprs = dashboard_exprs(league["session"])
    missing = exprs
    deadline = time.time() + 300
    while missing and time.time() < deadline:
        missing = [e for e in missing if not query(league, e)]
        if missing:
            time.sleep(5)
    print(f"\nmonitoring: {len(exprs) - len(missing)} of {len(exprs)} dashboard expressions have data "
          f"{time.time() - league['started']:.0f} s after launch")
    assert not missing, f"queries without data: {missing}"

    queries = variable_queries()
    assert queries
    for q in queries:
        call = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", q)
        assert call, f"unsupported variable query {q!r}"
        params = {"match[]": call[1]} if call[1] else {}
        values = requests.get(f"{league['prom']}/api/v1/label/{call[2]}/values", params=params, timeout=10).json()
        assert league["session"] in values["data"], (q, values)


def test_a_clean_stop_empties_the_targets_file(league):
    launcher = league["launcher"]
    launcher.send_signal(signal.SIGINT)
    launcher.wait(timeout=240)
    assert launcher.returncode == 0, "".join(league["lines"])
    assert json.loads(TARGETS_FILE.read_text()) == []
