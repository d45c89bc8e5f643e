"""The Grafana dashboard, its provisioning and the Prometheus config, checked as
files: every query names only metrics the league exports (as Ray exports them:
``ray_`` prefix, ``_total`` on counters, ``_bucket`` on histograms), every
exported metric is on the dashboard, and the files fit together. A test with a
real Prometheus scraping a real league is separate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

MONITORING = Path(__file__).resolve().parents[1] / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "league.json"

EXPORTED = {
    # counters
    "ray_league_env_steps_total", "ray_league_games_total", "ray_league_snapshots_total",
    "ray_league_exploiter_resets_total", "ray_league_learner_updates_total", "ray_league_snapshot_cache_loads_total",
    # gauges
    "ray_league_pool_size", "ray_league_nash_entropy", "ray_league_meta_exploitability", "ray_league_nash_weight",
    "ray_league_elo", "ray_league_win_rate_vs_nash", "ray_league_policy_version", "ray_league_learner_loss",
    "ray_league_diversity_score", "ray_league_nash_support_size", "ray_league_exact_nash_conv",
    "ray_league_meta_nash_exact_nash_conv", "ray_league_probe_br_return", "ray_league_outcome_novelty", "ray_league_reward_gap",
    "ray_league_anchor_score", "ray_league_anchor_elo",
    "ray_league_store_bytes", "ray_league_store_disk_full", "ray_league_store_refused_writes",
    "ray_league_snapshot_cache_bytes",
    # histograms
    "ray_league_coordinator_request_seconds_bucket", "ray_league_nash_solve_seconds_bucket",
    "ray_league_opponent_inference_seconds_bucket", "ray_league_opponent_batch_size_bucket",
}
LABELS = {
    "ray_league_env_steps_total": {"role"}, "ray_league_games_total": {"role", "result"},
    "ray_league_snapshots_total": {"role"}, "ray_league_exploiter_resets_total": {"role"},
    "ray_league_learner_updates_total": {"role", "learner"}, "ray_league_pool_size": {"role"},
    "ray_league_nash_weight": {"agent"}, "ray_league_elo": {"learner", "role"},
    "ray_league_win_rate_vs_nash": {"learner", "role"}, "ray_league_policy_version": {"learner", "role"},
    "ray_league_learner_loss": {"learner", "kind"}, "ray_league_coordinator_request_seconds_bucket": {"method", "le"},
    "ray_league_nash_solve_seconds_bucket": {"le"}, "ray_league_opponent_inference_seconds_bucket": {"le"},
    "ray_league_opponent_batch_size_bucket": {"le"}, "ray_league_probe_br_return": {"bound"},
    "ray_league_outcome_novelty": {"learner", "role"}, "ray_league_reward_gap": {"learner", "role"},
    "ray_league_anchor_score": {"anchor", "subject"}, "ray_league_anchor_elo": {"subject"},
    "ray_league_snapshot_cache_loads_total": {"process"}, "ray_league_snapshot_cache_bytes": {"process"},
}
RAY_LABELS = {"SessionName", "instance", "job", "NodeAddress", "WorkerId", "Component", "Version"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels inside collapsed rows
    return out


def _queries(dash: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _panels(dash) if p["type"] != "row" for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers left once strings,
    label matchers, ranges, grouping clauses and function calls are removed."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][\w:]*)\b(\s*\()?", s):
        if m.group(2) is None and m.group(1).lower() not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


def label_matchers(expr: str) -> list[tuple[str, set[str]]]:
    return [(m.group(1), set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", m.group(2))))
            for m in re.finditer(r"([A-Za-z_:][\w:]*)\{([^}]*)\}", expr)]


def test_metric_names_parser_finds_selected_metrics_only():
    expr = ('histogram_quantile(0.95, sum by (le, method) (rate(ray_league_coordinator_request_seconds_bucket'
            '{le="+Inf",SessionName=~"$SessionName"}[$__rate_interval]))) / on(method) group_left foo_bar offset 5m')
    assert metric_names(expr) == {"ray_league_coordinator_request_seconds_bucket", "foo_bar"}


def test_datasource_variable_and_unique_panel_ids():
    dash = _dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in _panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert dash["uid"] and dash["title"]


def test_every_panel_queries_prometheus_through_the_datasource_variable():
    dash = _dashboard()
    for p in _panels(dash):
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t.get("datasource", p["datasource"])["uid"] == "${datasource}", p["title"]
            assert t["expr"].strip(), p["title"]


def test_queries_name_only_exported_metrics_and_cover_all_of_them():
    dash = _dashboard()
    used = set()
    for title, expr in _queries(dash):
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        assert names <= EXPORTED, f"{title}: unknown metric(s) {sorted(names - EXPORTED)} in {expr!r}"
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        used |= names
    assert used == EXPORTED, f"metrics not on the dashboard: {sorted(EXPORTED - used)}"
    # template variables may only query exported metrics too
    for v in dash["templating"]["list"]:
        q = v.get("query")
        text = q.get("query", "") if isinstance(q, dict) else str(q or "")
        assert set(re.findall(r"ray_\w+", text)) <= EXPORTED, v["name"]


def test_queries_use_existing_labels_and_histograms_keep_le():
    for title, expr in _queries(_dashboard()):
        for name, labels in label_matchers(expr):
            assert labels <= LABELS.get(name, set()) | RAY_LABELS, f"{title}: {name} has no label(s) {labels}"
        for m in re.finditer(r"histogram_quantile\(\s*(0?\.\d+|1(?:\.0)?)\s*,\s*sum by \(([^)]*)\)", expr):
            assert "le" in {x.strip() for x in m.group(2).split(",")}, f"{title}: quantile without le: {expr}"
        if "histogram_quantile" in expr:
            assert metric_names(expr) <= {n for n in EXPORTED if n.endswith("_bucket")}, title


def test_panels_do_not_overlap():
    cells = {}
    for p in _panels(_dashboard()):
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_grafana_provisioning_points_at_prometheus_and_the_dashboards():
    ds = yaml.safe_load((MONITORING / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
    prov = yaml.safe_load((MONITORING / "grafana/provisioning/dashboards/league.yaml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file"  # its folder: tests/test_grafana.py


def test_prometheus_scrapes_ray_through_the_launchers_discovery_file():
    from monitoring.targets import TARGETS_FILE

    cfg = yaml.safe_load((MONITORING / "prometheus/prometheus.yml").read_text())
    assert cfg["global"]["scrape_interval"] == "5s"
    (job,) = cfg["scrape_configs"]
    files = [f for sd in job["file_sd_configs"] for f in sd["files"]]
    assert files == [str(TARGETS_FILE)]


def test_exported_names_match_the_metric_definitions():
    """The names above are what monitoring/metrics.py defines, as Ray exports them."""
    source = (MONITORING / "metrics.py").read_text()
    defined = re.findall(r'(Counter|Gauge|Histogram)\(\s*"(league_\w+)"', source)
    suffix = {"Counter": "_total", "Gauge": "", "Histogram": "_bucket"}
    assert {"ray_" + name + suffix[kind] for kind, name in defined} == EXPORTED
