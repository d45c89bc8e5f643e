"""The Grafana dashboards and provisioning, as far as a machine without a Grafana server can check
them: Grafana's own schema SDK (grafana-foundation-sdk) loads every dashboard and re-encodes it
without losing a field; data sources resolve to the provisioned one; every panel has a unit and a
legend. (That every query returns data from a live league is tests/test_monitoring.py.)"""

import json
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GRAFANA = ROOT / "monitoring/grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
DATASOURCES = [ds for f in sorted((GRAFANA / "provisioning/datasources").glob("*.yaml"))
               for ds in yaml.safe_load(f.read_text())["datasources"]]


def lost_fields(original, encoded, path=""):
    """Paths of the original JSON that the re-encoded one lacks or changed."""
    if isinstance(original, dict):
        if not isinstance(encoded, dict):
            return [path]
        return [p for k, v in original.items()
                for p in ([f"{path}/{k}"] if k not in encoded else lost_fields(v, encoded[k], f"{path}/{k}"))]
    if isinstance(original, list):
        if not isinstance(encoded, list) or len(original) != len(encoded):
            return [path]
        return [p for i, (a, b) in enumerate(zip(original, encoded)) for p in lost_fields(a, b, f"{path}[{i}]")]
    return [] if original == encoded else [path]


def panels(dash):
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])  # panels inside collapsed rows


def test_there_are_dashboards_and_one_provisioned_prometheus():
    assert DASHBOARDS
    assert [ds["type"] for ds in DATASOURCES] == ["prometheus"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_grafana_schema_sdk_loads_the_dashboard_and_reencodes_every_field(path):
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import dashboard, prometheus

    register_default_plugins()  # panel options and queries decode into their plugins' types
    raw = json.loads(path.read_text())
    model = dashboard.Dashboard.from_json(raw)
    encoded = json.loads(JSONEncoder().encode(model))
    assert lost_fields(raw, encoded) == []
    for panel in model.panels:
        if isinstance(panel, dashboard.Panel):
            # a dict here would mean the SDK did not recognise the panel type or its query
            assert not isinstance(panel.options, dict), panel.title
            assert all(isinstance(t, prometheus.Dataquery) for t in panel.targets or []), panel.title


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_datasource_resolves_to_the_provisioned_one(path):
    dash = json.loads(path.read_text())
    uids = {ds["uid"] for ds in DATASOURCES}
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    refs = [v["datasource"] for v in variables.values() if "datasource" in v]
    for panel in panels(dash):
        refs += [x["datasource"] for x in [panel, *panel.get("targets", [])] if "datasource" in x]
    assert refs
    for ref in refs:
        assert ref["type"] == "prometheus", ref
        var = re.fullmatch(r"\$\{?(\w+)\}?", ref["uid"])
        if var:  # a data source variable: of Prometheus type, defaulting to the provisioned one
            chosen = variables[var[1]]
            assert chosen["type"] == "datasource" and chosen["query"] == "prometheus", chosen
            assert chosen["current"]["value"] in uids, chosen
        else:
            assert ref["uid"] in uids, ref


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_has_a_unit_and_a_legend(path):
    shown = [p for p in panels(json.loads(path.read_text())) if p["type"] != "row"]
    assert len(shown) >= 20
    for panel in shown:
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        # a stat panel has no legend box: the legend format names its value
        assert panel["targets"] and all(t.get("legendFormat") for t in panel["targets"]), panel["title"]
        if panel["type"] == "timeseries":
            assert panel["options"]["legend"]["showLegend"], panel["title"]


def test_make_monitor_prints_grafana_commands_that_find_the_provisioning_and_dashboards():
    (provider,) = yaml.safe_load((GRAFANA / "provisioning/dashboards/league.yaml").read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == "${NASH_LEAGUE_DASHBOARDS}"
    out = subprocess.run(["make", "-s", "monitor-info"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    package = next(line.split() for line in out.stdout.splitlines() if line.strip().endswith("/usr/share/grafana"))
    env = dict(word.split("=", 1) for word in package if "=" in word)
    assert Path(env["GF_PATHS_PROVISIONING"]) == GRAFANA / "provisioning"
    assert sorted(Path(env["NASH_LEAGUE_DASHBOARDS"]).glob("*.json")) == DASHBOARDS
    docker = next(line.split() for line in out.stdout.splitlines() if line.strip().startswith("docker run"))
    mounts = dict(docker[i + 1].rsplit(":", 1)[0].split(":") for i, w in enumerate(docker) if w == "-v")
    assert mounts[str(GRAFANA / "provisioning")] == "/etc/grafana/provisioning"  # the image's default
    assert mounts[str(GRAFANA / "dashboards")] == docker[docker.index("-e") + 1].split("=", 1)[1]
    # the Prometheus `make monitor` starts is the one the provisioned data source points at
    prom = re.search(r"Prometheus at (http://\S+)", out.stdout)[1]
    assert urlsplit(prom).port == urlsplit(DATASOURCES[0]["url"]).port
