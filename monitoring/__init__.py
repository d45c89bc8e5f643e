"""Metrics (``monitoring.metrics``), the HTML report (``python -m monitoring.report``),
Grafana dashboards and the Prometheus config. Nothing is imported here: the
report must not pull in Ray, and the metrics must not pull in matplotlib."""
