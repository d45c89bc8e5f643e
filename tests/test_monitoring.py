"""A real Prometheus (Debian's package) scraping a real smoke league through Ray's
service discovery: every PromQL expression of the Grafana dashboard parses
(promtool) and returns data."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from actors.launch import League, load

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
PROM_PORT = 9391
METRICS_PORT = 9392  # outside Ray's worker port range (10002-19999)


@pytest.fixture(scope="module")
def ray_metrics():
    """A local Ray whose metrics agent exports on a known loopback port."""
    import ray

    ray.init(address="local", _node_ip_address="127.0.0.1", num_cpus=16, include_dashboard=False,
             _metrics_export_port=METRICS_PORT, log_to_driver=False, namespace="league-monitoring")
    yield ray
    ray.shutdown()


def dashboard_exprs() -> list[str]:
    dash = json.loads((ROOT / "monitoring/grafana/dashboards/league.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    # Grafana's variables, as Grafana would fill them in
    return [e.replace("$SessionName", ".*").replace("$__rate_interval", "1m") for e in exprs]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus (make test installs it)")
def test_every_dashboard_query_parses_and_returns_data_from_a_live_league(ray_metrics, tmp_path):
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    rules = tmp_path / "rules.yml"
    rules.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    # The shipped config discovers targets through Ray's service-discovery file, which names
    # the node by its network address; the test scrapes the same agent on loopback instead.
    config = yaml.safe_load((ROOT / "monitoring/prometheus/prometheus.yml").read_text())
    config["global"].update(scrape_interval="2s", scrape_timeout="2s")
    job = config["scrape_configs"][0]
    assert job["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]
    del job["file_sd_configs"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{METRICS_PORT}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{PROM_PORT}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    assert prom.poll() is None, f"prometheus exited: {prom.stderr.read()[-2000:]}"
    cfg, info = load(["--config", "configs/smoke.yaml", f"run.storage={tmp_path / 'run'}", "run.max_minutes=30",
                      "serve.api=false"])
    league = League(cfg, info)
    url = f"http://127.0.0.1:{PROM_PORT}/api/v1/query"
    try:
        missing = exprs
        deadline = time.time() + 240
        while missing and time.time() < deadline:
            league.supervise()
            time.sleep(5)
            still = []
            for e in missing:
                try:
                    body = requests.get(url, params={"query": e}, timeout=10).json()
                except requests.RequestException:
                    still.append(e)
                    continue
                assert body["status"] == "success", (e, body)
                if not body["data"]["result"]:
                    still.append(e)
            missing = still
        assert not missing, f"queries without data: {missing}"
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        league.stop()
        league.kill()
