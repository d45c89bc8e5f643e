"""The Prometheus discovery file the launcher keeps (monitoring/targets.py), without Ray."""

import json

from monitoring.targets import PrometheusTargets, metrics_endpoints

NODES = [
    {"Alive": True, "NodeManagerAddress": "10.0.0.1", "MetricsExportPort": 8080},
    {"Alive": True, "NodeManagerAddress": "10.0.0.2", "MetricsExportPort": 8080},
    {"Alive": False, "NodeManagerAddress": "10.0.0.3", "MetricsExportPort": 8080},  # a node that left
    {"Alive": True, "NodeManagerAddress": "10.0.0.4", "MetricsExportPort": -1},  # metrics collection off
    {"Alive": True, "NodeManagerAddress": "fe80::1", "MetricsExportPort": 8080},
]


def test_endpoints_are_the_alive_nodes_that_export_metrics():
    assert metrics_endpoints(NODES) == ["10.0.0.1:8080", "10.0.0.2:8080", "[fe80::1]:8080"]


def test_update_replaces_a_stale_file_and_follows_nodes(tmp_path):
    path = tmp_path / "sd" / "targets.json"
    path.parent.mkdir()
    path.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": ["127.0.0.1:9"]}]))
    targets = PrometheusTargets(path)
    targets.update(NODES[:1])
    assert json.loads(path.read_text()) == [{"labels": {"job": "ray"}, "targets": ["10.0.0.1:8080"]}]
    targets.update(NODES[:2])
    assert json.loads(path.read_text())[0]["targets"] == ["10.0.0.1:8080", "10.0.0.2:8080"]
    path.unlink()  # someone removed it: the next update writes it again
    targets.update(NODES[:2])
    assert json.loads(path.read_text())[0]["targets"] == ["10.0.0.1:8080", "10.0.0.2:8080"]
    assert [p.name for p in path.parent.iterdir()] == ["targets.json"]  # no temporary file left


def test_clear_empties_only_the_file_this_run_wrote(tmp_path):
    path = tmp_path / "targets.json"
    first, second = PrometheusTargets(path), PrometheusTargets(path)
    first.update(NODES[:1])
    second.update(NODES[1:2])  # a later run took the file over
    first.clear()
    assert json.loads(path.read_text())[0]["targets"] == ["10.0.0.2:8080"]
    second.clear()
    assert json.loads(path.read_text()) == []


def test_an_unwritable_path_costs_only_a_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    targets = PrometheusTargets(blocker / "targets.json")  # its parent is a file
    assert targets.update(NODES) == ["10.0.0.1:8080", "10.0.0.2:8080", "[fe80::1]:8080"]
    targets.clear()
    assert "cannot write Prometheus targets" in caplog.text


def test_a_busy_metrics_port_falls_back_to_one_ray_picks():
    # Ray would time its node out after ~35 s with no word about the port (measured with Ray 2.60).
    import socket

    from actors.runtime import metrics_port

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert metrics_port(port) is None
    assert metrics_port(port) == port
    assert metrics_port(None) is None
