"""Every metric the league exports, in one place.

Defined with ``ray.util.metrics`` and exported through each node's metrics
agent, so Prometheus sees them as ``ray_<name>`` (counters with ``_total``).
Labels stay bounded: roles, learner ids, agent ids of the Nash support,
coordinator method names; never a label per game, step or observation.
See docs/metrics.md for the meaning of each.
"""

from __future__ import annotations

import time
from functools import cached_property

LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]
BATCH_BUCKETS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
# The coordinator's gauges that exist from the start, at these values, and keep their last value
# while it reports anything: states and counts a panel must show before their first event (a
# healthy league's disk never fills). Ray exports a gauge only in the export interval after it was set, and
# its agent drops it two intervals later, so a held value is set again with the process's reports.
HELD = {"store_disk_full": 0.0, "store_refused_writes": 0.0}
HELD_RESEND_SECONDS = 1.0  # Ray's export interval is at least a second


class LeagueMetrics:
    """Lazily created metric objects (they must be made inside the Ray process that reports). The
    ``held`` gauges (the coordinator's ``HELD``; none elsewhere, so that only the process that owns
    a state exports it) are set at their start values when the objects are made, and set again at
    most every ``HELD_RESEND_SECONDS`` with any report."""

    def __init__(self, held: dict[str, float] | None = None):
        self.held = dict(held or {})  # the held gauges' last values
        self._held_sent = 0.0

    @cached_property
    def _m(self):
        from ray.util.metrics import Counter, Gauge, Histogram

        metrics = self._define(Counter, Gauge, Histogram)
        self._held_sent = time.monotonic()
        for name, value in self.held.items():
            metrics[name].set(value)
        return metrics

    @staticmethod
    def _define(Counter, Gauge, Histogram) -> dict:
        return {
            "env_steps": Counter("league_env_steps", "Environment steps played, by the learner's role", ("role",)),
            "games": Counter("league_games", "Finished games by the learner's role and result (win/draw/loss)",
                             ("role", "result")),
            "snapshots": Counter("league_snapshots", "Snapshots added to the pool, by role", ("role",)),
            "resets": Counter("league_exploiter_resets", "Learner resets after a snapshot, by role", ("role",)),
            "updates": Counter("league_learner_updates", "PPO updates", ("role", "learner")),
            "pool_size": Gauge("league_pool_size", "Frozen agents in the pool, by role", ("role",)),
            "nash_entropy": Gauge("league_nash_entropy", "Entropy of the Nash mixture over the pool (nats)"),
            "meta_exploitability": Gauge("league_meta_exploitability",
                                         "Best pure deviation's gain against the Nash mixture (expected score)"),
            "exact_nash_conv": Gauge("league_exact_nash_conv",
                                     "Exact NashConv of the Nash mixture in the game (Kuhn, Leduc), last measured"),
            "meta_nash_exact_nash_conv": Gauge("league_meta_nash_exact_nash_conv",
                                               "Exact NashConv of the meta-game Nash (Kuhn, Leduc): the published "
                                               "mixture's unless evaluator.publish is least_exploitable, where it is "
                                               "measured beside it"),
            "probe_br_return": Gauge("league_probe_br_return",
                                     "A trained best response's mean return against the Nash mixture (a lower bound "
                                     "on its exploitability), last probe; bound = mean, ci95_low, ci95_high",
                                     ("bound",)),
            "anchor_score": Gauge("league_anchor_score",
                                  "Last score in [0, 1] against a fixed anchor (config `anchors`) of the published "
                                  "Nash mixture (subject=published), the same with search (subject=published_search, "
                                  "config `search`) or the newest main agent (subject=newest_main)",
                                  ("anchor", "subject")),
            "anchor_elo": Gauge("league_anchor_elo",
                                "Elo rating from the last scores against the anchors of fixed rating "
                                "(maximum likelihood; uniform = 1000 unless anchor_elo says otherwise)", ("subject",)),
            "nash_weight": Gauge("league_nash_weight", "Nash weight of an agent (agents in or recently in the support)",
                                 ("agent",)),
            "nash_support": Gauge("league_nash_support_size", "Agents with positive Nash weight"),
            "elo": Gauge("league_elo", "Elo rating of a learner (uniform random anchored at 1000)", ("learner", "role")),
            "win_rate_vs_nash": Gauge("league_win_rate_vs_nash", "A learner's expected score against the Nash mixture",
                                      ("learner", "role")),
            "policy_version": Gauge("league_policy_version", "A learner's published policy version", ("learner", "role")),
            "loss": Gauge("league_learner_loss", "Last PPO losses of a learner", ("learner", "kind")),
            "outcome_novelty": Gauge("league_outcome_novelty",
                                     "Mean distance of a learner's outcome vectors (its returns against k opponents) "
                                     "in its last update to the nearest of earlier updates", ("learner", "role")),
            "reward_gap": Gauge("league_reward_gap", "Mean shaped minus raw return per episode of a learner's last "
                                "update (0 without a reward shaper)", ("learner", "role")),
            "diversity": Gauge("league_diversity_score", "Mean pairwise cosine distance of behaviour embeddings"),
            "store_disk_full": Gauge("league_store_disk_full",
                                     "1 while the store's disk is full: nothing is acknowledged until space returns"),
            "store_refused_writes": Gauge("league_store_refused_writes", "Store writes that failed for want of disk "
                                          "space since the coordinator started (each retry counts)"),
            "snapshot_loads": Counter("league_snapshot_cache_loads",
                                      "Snapshots loaded into a process's cache (misses; snapshots.cache_size and "
                                      "cache_mb bound what it holds), by process kind", ("process",)),
            "snapshot_cache_bytes": Gauge("league_snapshot_cache_bytes",
                                          "Weights held in a process's snapshot cache (bounded by snapshots.cache_mb), "
                                          "by process kind", ("process",)),
            "store_bytes": Gauge("league_store_bytes", "Size of the league's store on disk (league.db and its WAL)"),
            "request_seconds": Histogram("league_coordinator_request_seconds", "Coordinator request latency",
                                         LATENCY_BUCKETS, ("method",)),
            "nash_solve_seconds": Histogram("league_nash_solve_seconds", "Time to re-solve the Nash", LATENCY_BUCKETS),
            "inference_seconds": Histogram("league_opponent_inference_seconds",
                                           "Latency of one opponent inference call", LATENCY_BUCKETS),
            "batch_size": Histogram("league_opponent_batch_size",
                                    "Observations per opponent inference pass (all snapshots stacked)",
                                    BATCH_BUCKETS),
        }

    def _resend_held(self) -> None:
        if time.monotonic() - self._held_sent >= HELD_RESEND_SECONDS:
            self._held_sent = time.monotonic()
            for name, value in self.held.items():
                self._m[name].set(value)

    def inc(self, name: str, value: float = 1.0, **tags) -> None:
        if value > 0:
            self._m[name].inc(value, tags=tags or None)
        self._resend_held()

    def set(self, name: str, value: float, **tags) -> None:
        if name in self.held and not tags:
            self.held[name] = float(value)
        self._m[name].set(float(value), tags=tags or None)
        self._resend_held()

    def observe(self, name: str, value: float, **tags) -> None:
        self._m[name].observe(float(value), tags=tags or None)
        self._resend_held()


def result_label(score: float) -> str:
    return "win" if score > 0.5 else "loss" if score < 0.5 else "draw"
