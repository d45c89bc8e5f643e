"""monitoring.metrics without Ray: what the metric objects report, recorded by stand-ins for
``ray.util.metrics``'s classes."""

from __future__ import annotations

import pytest

import monitoring.metrics as metrics_mod
from monitoring.metrics import HELD, LeagueMetrics


class Recorded:
    """A stand-in for a Ray metric: every value recorded, with its tags."""

    log: list[tuple[str, str, float, dict | None]] = []

    def __init__(self, name, description="", *args):
        self.name = name

    def set(self, value, tags=None):
        Recorded.log.append((self.name, "set", value, tags))

    def inc(self, value=1.0, tags=None):
        Recorded.log.append((self.name, "inc", value, tags))

    def observe(self, value, tags=None):
        Recorded.log.append((self.name, "observe", value, tags))


@pytest.fixture
def recorded(monkeypatch):
    import ray.util.metrics

    for cls in ("Counter", "Gauge", "Histogram"):
        monkeypatch.setattr(ray.util.metrics, cls, Recorded)
    Recorded.log = []
    return Recorded.log


def last(log, name):
    values = [value for n, kind, value, tags in log if n == name and kind == "set"]
    return values[-1] if values else None


def test_the_store_gauges_report_zero_before_any_event(recorded):
    """Before: ``league_store_disk_full`` and ``league_store_refused_writes`` were recorded only by
    the coordinator, once, and so were gone from Prometheus until the disk first filled."""
    m = LeagueMetrics(held=HELD)  # the coordinator's
    m.inc("games", 3, role="main_agent", result="win")  # the first report of a healthy league
    assert last(recorded, "league_store_disk_full") == 0.0
    assert last(recorded, "league_store_refused_writes") == 0.0
    assert set(HELD) == {"store_disk_full", "store_refused_writes"}


def test_only_the_coordinator_exports_the_store_gauges(recorded):
    """A learner's or a worker's metrics hold no gauge of the store's: a 0 from them beside the
    coordinator's 1 would be a second, wrong answer to 'is the disk full'."""
    m = LeagueMetrics()
    m.inc("games", 3, role="main_agent", result="win")
    assert last(recorded, "league_store_disk_full") is None
    assert last(recorded, "league_store_refused_writes") is None


def test_held_gauges_are_sent_again_with_later_reports_at_their_last_value(recorded, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(metrics_mod.time, "monotonic", lambda: clock[0])
    m = LeagueMetrics(held=HELD)
    m.set("store_refused_writes", 2.0)
    m.set("store_disk_full", 1.0)
    del recorded[:]
    m.inc("games", 1, role="main_agent", result="win")  # within a second: nothing sent again
    assert last(recorded, "league_store_disk_full") is None
    clock[0] += metrics_mod.HELD_RESEND_SECONDS
    m.observe("request_seconds", 0.01, method="ping")
    assert last(recorded, "league_store_disk_full") == 1.0
    assert last(recorded, "league_store_refused_writes") == 2.0
