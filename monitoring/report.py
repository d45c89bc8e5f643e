"""A self-contained HTML report of a league, read from its SQLite store alone.

    python -m monitoring.report --storage RUN_DIR [--out FILE]

writes ``RUN_DIR/report.html`` (or ``FILE``): figures are PNGs drawn with
matplotlib's Agg backend and embedded as base64, so the file opens anywhere
without the run, a server or the network. It shows

- the payoff heatmap of the current pool, ordered by Nash weight: the expected
  score of the row agent against the column agent, (wins + draws/2) / games,
  blank where the pair has not been measured;
- the Nash weights over time (top agents by peak weight, the rest as "other")
  and the Nash entropy;
- the Elo of every learner over time, by role;
- exploitability: the exact NashConv measurements the league recorded (kind
  ``nash_conv``) and the meta-game exploitability of each solved Nash; for Kuhn
  and Leduc poker the exact NashConv of the latest Nash mixture is computed now
  (Lanctot et al. 2017; see ``evaluation.exploitability``);
- the lineage: which learner produced which snapshot when, with resets and
  evictions;
- the objective of each learner over time (docs/objectives.md): the novelty of
  its outcome vectors and the mean shaped minus raw reward per episode, as its
  learner recorded them (kind ``objective``), and the updates a failing reward
  shaper made it skip;
- a summary: game, pool size by role, counters, learners, the Nash support.

Numbers a program may want are also in a ``<script type="application/json"
id="report-summary">`` block. The store is opened read-only (``evaluation.stored_run``): a
missing, empty or foreign store exits with code 2 and one line on stderr, and nothing is written.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
import logging
import math
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from evaluation.stored_run import StoredRun, load_nash_mixture
from league import measures
from league.anchors import SUBJECTS, elo_kind, score_kind
from league.config import ROLE_CONFIGS
from league.errors import ArgumentParser, UsageError, fail

log = logging.getLogger(__name__)

ROLE_ORDER = tuple(ROLE_CONFIGS)  # the registry's order; colours and markers by position
ROLE_COLOR = dict(zip(ROLE_ORDER, ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")))
ROLE_MARKER = dict(zip(ROLE_ORDER, ("o", "^", "s", "v", "P", "X")))
# Exact NashConv walks the whole game tree once per best response; a mixture's
# behavioural table costs one forward pass per member over every information
# state (Leduc: 1872), so cap members x states to keep the report quick
# (Leduc: 30 members; Kuhn, 24 states: any realistic support).
EXACT_MAX_MEMBER_STATES = 60_000
TOP_K_WEIGHTS = 8
MAX_LABELLED_AGENTS = 40
MAX_NASH_POINTS = 2000  # a days-long run re-solves the Nash tens of thousands of times


@dataclass
class ReportData:
    """Everything the report shows, read from the store in one pass."""

    run_dir: str
    db_path: str
    game: str | None
    game_params: dict
    created_at: float | None
    agents: list[dict[str, Any]]  # current pool, oldest first
    removed: list[dict[str, Any]]  # evicted agents, with removed_at
    payoff: list[tuple[str, str, float, float, float]]
    nash: list[dict[str, Any]]
    elo_history: list[tuple[float, str, str | None, float]]
    learners: list[dict[str, Any]]
    events: list[dict[str, Any]]
    nash_conv: list[dict[str, Any]]
    counters: dict[str, float]
    exact: dict[str, Any] = field(default_factory=dict)  # NashConv of the latest mixture, or why not
    probe: list[dict[str, Any]] = field(default_factory=list)  # best-response probes (measurements)
    objective: list[dict[str, Any]] = field(default_factory=list)  # learners' outcome novelty and reward gap
    meta_nash_conv: list[dict[str, Any]] = field(default_factory=list)  # the meta-game Nash's, beside a published LP mixture
    # scores against fixed anchors and anchored Elo, by measurement kind (league.anchors)
    anchors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def latest_nash(self) -> dict[str, Any] | None:
        return self.nash[-1] if self.nash else None

    def t0(self) -> float:
        """Start of the run's clock: the store's creation, else the earliest time seen."""
        if self.created_at:
            return float(self.created_at)
        times = [a["created_at"] for a in self.agents + self.removed] + [e["time"] for e in self.events]
        times += [n["solved_at"] for n in self.nash] + [r[0] for r in self.elo_history]
        return min(times) if times else time.time()

    def t1(self) -> float:
        """Latest time seen in the store."""
        times = [a["created_at"] for a in self.agents + self.removed] + [e["time"] for e in self.events]
        times += [n["solved_at"] for n in self.nash] + [r[0] for r in self.elo_history]
        times += [m["time"] for m in self.nash_conv] + [m["time"] for m in self.probe]
        times += [m["time"] for m in self.objective]
        times += [m["time"] for rows in self.anchors.values() for m in rows]
        return max(times) if times else self.t0()


class ReportError(Exception):
    """The store cannot be read; the CLI prints the one error line (``what``: the option or file,
    ``why``) and exits with 2."""

    def __init__(self, message: str, what: str = "--storage"):
        super().__init__(message)
        self.what, self.why = what, message


# -- reading ------------------------------------------------------------------
def load(run_dir: str | Path) -> ReportData:
    """Read everything the report needs from ``RUN_DIR/league.db``."""
    try:
        run = StoredRun(run_dir)  # read-only: a missing, empty or foreign file is refused, never made a store
    except UsageError as exc:
        raise ReportError(exc.why, exc.what) from None
    store = run.store
    try:
        with run:
            game = run.game
            events = store.events()
            current = store.agents()
            live = {r.agent_id for r in current}
            evicted_at = {e["agent_id"]: e["time"] for e in events if e["kind"] == "evict" and "agent_id" in e}
            removed = [r for r in store.agents(include_removed=True) if r.agent_id not in live]
            return ReportData(
                run_dir=str(run_dir),
                db_path=str(store.path),
                game=game,
                game_params=store.get_meta("game_params") or {},
                created_at=store.get_meta("created_at"),
                agents=[_agent(r) for r in current],
                removed=[{**_agent(r), "removed_at": evicted_at.get(r.agent_id, r.created_at)} for r in removed],
                payoff=store.payoff_rows(),
                nash=store.nash_history(),
                elo_history=store.elo_history(),
                learners=store.learners(),
                events=events,
                nash_conv=store.measurements(measures.NASH_CONV),
                counters=store.counters(),
                probe=store.measurements(measures.PROBE),
                objective=store.measurements(measures.OBJECTIVE),
                meta_nash_conv=store.measurements(measures.META_NASH_CONV),
                anchors={kind: store.measurements(kind) for kind in store.measurement_kinds(measures.ANCHOR)},
            )
    except (sqlite3.DatabaseError, ValueError, KeyError) as exc:
        raise ReportError(f"{store.path} could not be read: {exc}") from None


def _agent(record) -> dict[str, Any]:
    return {"agent_id": record.agent_id, "role": record.agent_type.value, "learner_id": record.learner_id,
            "created_at": record.created_at, "step": record.step}


def payoff_matrix(data: ReportData, ids: list[str]) -> np.ndarray:
    """Expected score of row vs column, (wins + draws/2) / games; NaN where unmeasured.

    The store keeps one row per pair in one orientation. Should both orientations
    be there, the one with more games wins: results between frozen agents never
    decay, so their game count only grows and the larger row is the newer one.
    """
    index = {a: i for i, a in enumerate(ids)}
    n = len(ids)
    score = np.full((n, n), np.nan)
    games = np.zeros((n, n))
    for a, b, w, d, l in data.payoff:
        i, j = index.get(a), index.get(b)
        g = w + d + l
        if i is None or j is None or i == j or g <= 0 or g < games[i, j]:
            continue
        score[i, j], score[j, i] = (w + d / 2) / g, (l + d / 2) / g
        games[i, j] = games[j, i] = g
    return score


def nash_order(data: ReportData) -> tuple[list[str], dict[str, float]]:
    """Current pool ids by decreasing latest Nash weight (ties: oldest first) and the weights."""
    nash = data.latest_nash
    weights = dict(zip(nash["ids"], nash["weights"])) if nash else {}
    ids = [a["agent_id"] for a in data.agents]
    ids.sort(key=lambda a: -weights.get(a, 0.0))  # stable: ties keep pool order
    return ids, weights


def nash_support(data: ReportData, eps: float = 1e-9) -> list[tuple[str, float]]:
    nash = data.latest_nash
    if not nash:
        return []
    return sorted(((a, float(w)) for a, w in zip(nash["ids"], nash["weights"]) if w > eps), key=lambda x: -x[1])


def pool_by_role(data: ReportData) -> dict[str, int]:
    counts = {role: 0 for role in ROLE_ORDER}
    for a in data.agents:
        counts[a["role"]] = counts.get(a["role"], 0) + 1
    return counts


def exact_nash_conv(data: ReportData) -> dict[str, Any]:
    """NashConv of the latest Nash mixture, computed now, where the game allows it.

    Returns ``{"nash_conv", "exploitability", "members", "seconds"}``, or
    ``{"skipped": reason}``.
    """
    from envs import make_game

    try:
        game = make_game(data.game, 1, **data.game_params) if data.game else None
    except (ValueError, TypeError) as exc:
        return {"skipped": f"game {data.game!r} cannot be built: {exc}"}
    from evaluation.exploitability import exact_nash_conv, information_state_count, is_exact

    if game is None or not is_exact(game):
        return {"skipped": f"game {data.game} does not support exact evaluation"}
    support = nash_support(data)
    if not support:
        return {"skipped": "no Nash mixture yet"}

    cap = EXACT_MAX_MEMBER_STATES // information_state_count(game)
    if len(support) > cap:
        return {"skipped": f"{len(support)} members in the Nash support; the report computes {data.game} "
                           f"NashConv for at most {cap} (use python -m evaluation.exploitability --storage)"}
    try:
        start = time.perf_counter()
        ids, models, weights = load_nash_mixture(data.run_dir)
        out = exact_nash_conv(game, models, weights)
    except (ValueError, KeyError) as exc:
        return {"skipped": f"could not compute: {exc}"}
    seconds = time.perf_counter() - start
    try:
        uniform = exact_nash_conv(game, [], [])["nash_conv"]  # the reference line: 11/12 on Kuhn
    except (ValueError, KeyError):
        uniform = None
    return {"nash_conv": out["nash_conv"], "exploitability": out["exploitability"], "members": len(ids),
            "seconds": seconds, "uniform": uniform}


# -- figures --------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _no_data(ax, text: str = "no data yet") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=13, color="0.4", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _time_unit(span: float) -> tuple[float, str]:
    if span < 180:
        return 1.0, "s"
    if span < 3 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


class _Clock:
    """Maps store times to elapsed run time in a readable unit."""

    def __init__(self, data: ReportData):
        self.t0 = data.t0()
        self.scale, self.unit = _time_unit(max(data.t1() - self.t0, 0.0))

    def __call__(self, t):
        return (np.asarray(t, dtype=float) - self.t0) / self.scale

    @property
    def label(self) -> str:
        return f"time since start ({self.unit})"


def fig_payoff(data: ReportData):
    plt = _plt()
    ids, weights = nash_order(data)
    n = len(ids)
    size = min(12.0, 4.0 + 0.18 * n)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    score = payoff_matrix(data, ids) if n else np.zeros((0, 0))
    if n == 0 or np.all(np.isnan(score)):
        _no_data(ax, "no data yet" if n == 0 else "no measured pairs yet")
        ax.set_title("Payoff: expected score of row vs column")
        return fig, False
    cmap = plt.get_cmap("RdBu").with_extremes(bad="white")
    # centre the colours on 1/2 and stretch them to the largest deviation seen:
    # a young league's payoffs sit near 1/2 and would all look white on [0, 1]
    spread = min(0.5, max(0.05, math.ceil(np.nanmax(np.abs(score - 0.5)) * 20) / 20))
    im = ax.imshow(np.ma.masked_invalid(score), cmap=cmap, vmin=0.5 - spread, vmax=0.5 + spread,
                   interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="expected score of row vs column")
    support = sum(1 for a in ids if weights.get(a, 0.0) > 1e-9)
    if 0 < support < n:
        for line in (ax.axhline, ax.axvline):
            line(support - 0.5, color="black", lw=1.2, ls="--")
    if n <= MAX_LABELLED_AGENTS:
        labels = [f"{a} ({weights[a]:.2f})" if weights.get(a, 0.0) > 1e-9 else a for a in ids]
        ax.set_xticks(range(n), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(n), labels, fontsize=7)
    else:
        ax.set_xlabel("column agent (by Nash weight)")
        ax.set_ylabel("row agent (by Nash weight)")
    ax.set_title(f"Payoff over the pool: {n} agents by Nash weight\n"
                 f"(wins + draws/2) / games; blank: unmeasured; dashed: end of the {support}-agent support",
                 fontsize=9)
    fig.tight_layout()
    return fig, True


def fig_nash(data: ReportData):
    plt = _plt()
    fig, (ax_w, ax_h) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    clock = _Clock(data)
    if not data.nash:
        _no_data(ax_w)
        _no_data(ax_h)
        ax_w.set_title("Nash weights over time")
        return fig, False
    keep = np.unique(np.linspace(0, len(data.nash) - 1, min(len(data.nash), MAX_NASH_POINTS)).round().astype(int))
    nash = [data.nash[k] for k in keep]
    # top k by peak weight; ties (pure Nash solutions all peak at 1) go to the
    # agent that holds more weight now, then to the one that held it longer
    peak: dict[str, float] = {}
    held: dict[str, float] = {}
    for k, row in enumerate(nash):
        until = nash[k + 1]["solved_at"] if k + 1 < len(nash) else data.t1()
        for a, w in zip(row["ids"], row["weights"]):
            peak[a] = max(peak.get(a, 0.0), float(w))
            held[a] = held.get(a, 0.0) + float(w) * max(until - row["solved_at"], 0.0)
    now = dict(zip(nash[-1]["ids"], nash[-1]["weights"]))
    ranked = sorted(peak, key=lambda a: (-round(peak[a], 9), -now.get(a, 0.0), -held[a]))
    top = [a for a in ranked if peak[a] > 1e-9][:TOP_K_WEIGHTS]
    x = clock([row["solved_at"] for row in nash])
    series = np.zeros((len(top) + 1, len(nash)))
    for k, row in enumerate(nash):
        w = dict(zip(row["ids"], row["weights"]))
        for i, a in enumerate(top):
            series[i, k] = w.get(a, 0.0)
        series[-1, k] = max(0.0, sum(w.values()) - series[:-1, k].sum())
    # extend the last solve to the end of the run so a single solve is still visible
    end = max(float(clock(data.t1())), float(x[-1]) + 1e-3)
    x = np.append(x, end)
    series = np.concatenate([series, series[:, -1:]], axis=1)
    labels = top + ["other"]
    shown = [i for i in range(len(labels)) if series[i].max() > 0] or [0]
    colors = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]  # grey is for "other"
    ax_w.stackplot(x, series[shown], labels=[labels[i] for i in shown], step="post",
                   colors=[colors[i % len(colors)] if labels[i] != "other" else "0.75" for i in shown], alpha=0.9)
    ax_w.set_ylim(0, 1)
    ax_w.set_ylabel("Nash weight")
    ax_w.set_title(f"Nash weights over time (top {len(top)} agents by peak weight)")
    ax_w.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ent = [row["entropy"] for row in nash]
    ax_h.step(x, ent + [ent[-1]], where="post", color="black")
    ax_h.set_ylabel("entropy (nats)")
    ax_h.set_xlabel(clock.label)
    ax_h.set_title("Nash entropy")
    fig.tight_layout()
    return fig, True


def fig_elo(data: ReportData):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.set_title("Elo of the learners")
    if not data.elo_history:
        _no_data(ax)
        return fig, False
    clock = _Clock(data)
    by_agent: dict[str, list[tuple[float, float]]] = {}
    role_of: dict[str, str | None] = {}
    for t, agent, role, rating in data.elo_history:
        by_agent.setdefault(agent, []).append((t, rating))
        role_of[agent] = role
    styles = ["-", "--", ":", "-."]
    seen: dict[str | None, int] = {}
    for agent in sorted(by_agent, key=lambda a: (ROLE_ORDER.index(role_of[a]) if role_of[a] in ROLE_ORDER else 9, a)):
        role = role_of[agent]
        k = seen[role] = seen.get(role, -1) + 1
        pts = np.array(by_agent[agent])
        ax.plot(clock(pts[:, 0]), pts[:, 1], color=ROLE_COLOR.get(role, "0.3"), ls=styles[k % len(styles)],
                marker="." if len(pts) < 3 else None, label=f"{agent} ({role})")
    ax.set_xlabel(clock.label)
    ax.set_ylabel("Elo")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig, True


def fig_exploitability(data: ReportData):
    plt = _plt()
    fig, (ax_nc, ax_meta) = plt.subplots(1, 2, figsize=(12, 4.2))
    clock = _Clock(data)
    has = False
    exact = data.exact
    if data.nash_conv or "nash_conv" in exact or data.probe:
        if data.probe:
            # a best response's return is at most the exploitability, NashConv / 2: twice it is a
            # lower bound on NashConv, on the same axis
            ci = np.array([m.get("ci95", [m["value"], m["value"]]) for m in data.probe], dtype=float)
            v = np.array([m["value"] for m in data.probe], dtype=float)
            ax_nc.errorbar(clock([m["time"] for m in data.probe]), 2 * v,
                           yerr=[2 * (v - ci[:, 0]), 2 * (ci[:, 1] - v)], fmt="s", ms=4, color="#2ca02c",
                           capsize=3, label="best-response probe: 2 x BR return (lower bound), 95% CI")
        if data.nash_conv:
            ax_nc.plot(clock([m["time"] for m in data.nash_conv]), [m["value"] for m in data.nash_conv],
                       marker=".", color="#9467bd", label="recorded (measurements)")
        if data.meta_nash_conv:
            ax_nc.plot(clock([m["time"] for m in data.meta_nash_conv]), [m["value"] for m in data.meta_nash_conv],
                       marker=".", color="#8c564b", alpha=0.7,
                       label="meta-game Nash of the same snapshots (the published mixture is the least exploitable)")
        if "nash_conv" in exact:
            ax_nc.plot([float(clock(data.t1()))], [exact["nash_conv"]], marker="*", ms=14, ls="none",
                       color="black", label=f"latest Nash mixture, now: {exact['nash_conv']:.4f}")
        if exact.get("uniform") is not None:
            ax_nc.axhline(exact["uniform"], color="0.5", ls="--", lw=1,
                          label=f"uniform random: {exact['uniform']:.4f}")
        ax_nc.set_xlim(0, max(float(clock(data.t1())), 1e-3) * 1.03)
        shown = [m["value"] for m in data.nash_conv + data.meta_nash_conv]
        shown += [exact.get("nash_conv") or 0.0, exact.get("uniform") or 0.0]
        shown += [2 * m.get("ci95", [0, m["value"]])[1] for m in data.probe]
        ax_nc.set_ylim(0, max(max(shown) * 1.25, 1e-3))  # headroom for the legend
        ax_nc.set_xlabel(clock.label)
        ax_nc.set_ylabel("NashConv")
        ax_nc.grid(alpha=0.3)
        ax_nc.legend(fontsize=8, loc="upper left")
        has = True
    else:
        _no_data(ax_nc, "no exact NashConv for this run"
                 + (f"\n({exact['skipped']})" if exact.get("skipped") else ""))
        for t in ax_nc.texts:
            t.set_fontsize(9)
            t.set_wrap(True)
    ax_nc.set_title(f"NashConv of the Nash mixture ({data.game or 'game unknown'})")
    if data.nash:
        x = clock([row["solved_at"] for row in data.nash])
        meta = [row["meta_exploitability"] for row in data.nash]
        ax_meta.step(x, meta, where="post", color="#ff7f0e", marker="." if len(x) < 3 else None)
        ax_meta.set_ylim(0, max(max(meta) * 1.1, 0.01))  # an LP's 1e-16 is zero, not a scale
        ax_meta.set_xlabel(clock.label)
        ax_meta.set_ylabel("best deviation gain (expected score)")
        ax_meta.grid(alpha=0.3)
        has = True
    else:
        _no_data(ax_meta)
    ax_meta.set_title("Meta-game exploitability (within the pool)")
    fig.tight_layout()
    return fig, has


def fig_lineage(data: ReportData):
    plt = _plt()
    learners = sorted({a["learner_id"] or "seed" for a in data.agents + data.removed}
                      | {l["learner_id"] for l in data.learners},
                      key=lambda l: (next((i for i, r in enumerate(ROLE_ORDER) if l.startswith(r)), 9), l))
    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.6 * max(len(learners), 2)))
    ax.set_title("Lineage: snapshots by learner (filled: in the pool, hollow: evicted; "
                 "| reset, x eviction, ring: Nash support)", fontsize=10)
    if not data.agents and not data.removed:
        _no_data(ax)
        return fig, False
    clock = _Clock(data)
    y = {l: i for i, l in enumerate(learners)}
    support = dict(nash_support(data))
    row = lambda a: y[a["learner_id"] or "seed"]  # noqa: E731
    roles = list(ROLE_ORDER) + sorted({a["role"] for a in data.agents + data.removed} - set(ROLE_ORDER))
    for role in roles:
        live = [a for a in data.agents if a["role"] == role]
        gone = [a for a in data.removed if a["role"] == role]
        color, marker = ROLE_COLOR.get(role, "0.3"), ROLE_MARKER.get(role, "D")
        if live:
            ax.scatter(clock([a["created_at"] for a in live]), [row(a) for a in live],
                       color=color, marker=marker, s=36, zorder=3, label=f"{role} snapshot")
        if gone:
            ax.scatter(clock([a["created_at"] for a in gone]), [row(a) for a in gone], facecolors="none",
                       edgecolors=color, marker=marker, s=36, zorder=3, label=None if live else f"{role} snapshot")
            ax.hlines([row(a) for a in gone], clock([a["created_at"] for a in gone]),
                      clock([a["removed_at"] for a in gone]), color=color, lw=0.6, alpha=0.4)
            ax.scatter(clock([a["removed_at"] for a in gone]), [row(a) for a in gone],
                       color=color, marker="x", s=20, alpha=0.7)
    in_support = [a for a in data.agents if a["agent_id"] in support]
    if in_support:
        ax.scatter(clock([a["created_at"] for a in in_support]), [row(a) for a in in_support],
                   s=[120 + 600 * support[a["agent_id"]] for a in in_support], facecolors="none",
                   edgecolors="black", lw=1.2, zorder=4)
    resets = [e for e in data.events if e["kind"] == "reset" and e.get("learner_id") in y]
    if resets:
        ax.scatter(clock([e["time"] for e in resets]), [y[e["learner_id"]] for e in resets], marker="|", s=260,
                   color="black", lw=1.5, zorder=5, label=f"reset ({len(resets)})")
    ax.set_yticks(range(len(learners)), learners)
    ax.set_ylim(-0.7, len(learners) - 0.3)
    ax.set_xlabel(clock.label)
    ax.grid(axis="x", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if in_support:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], ls="none", marker="o", ms=11, mfc="none", mec="black"))
        labels.append("in the Nash support (size: weight)")
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig, True


def objective_by_learner(data: ReportData) -> dict[str, list[dict[str, Any]]]:
    """The ``objective`` measurements of each learner, oldest first."""
    out: dict[str, list[dict[str, Any]]] = {}
    for m in data.objective:
        if "learner" in m:
            out.setdefault(str(m["learner"]), []).append(m)
    return out


def fig_objective(data: ReportData):
    plt = _plt()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    top.set_title("Objective: outcome-vector novelty and shaped - raw reward, per learner")
    series = objective_by_learner(data)
    if not series:
        _no_data(top)
        _no_data(bottom)
        return fig, False
    clock = _Clock(data)
    for learner, rows in sorted(series.items()):
        t = clock(np.array([r["time"] for r in rows]))
        color = ROLE_COLOR.get(rows[-1].get("role"), "0.3")
        k, shaper = rows[-1].get("k_opponents", 1), rows[-1].get("shaper")
        label = f"{learner} (k={k}, {shaper or 'no shaper'})"
        marker = "." if len(rows) < 3 else None
        top.plot(t, [r.get("outcome_novelty", r["value"]) for r in rows], color=color, marker=marker, label=label)
        bottom.plot(t, [r.get("reward_gap", 0.0) for r in rows], color=color, marker=marker, label=label)
    top.set_ylabel("outcome novelty")
    bottom.set_ylabel("shaped - raw reward")
    bottom.set_xlabel(clock.label)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig, True


def anchor_scores(data: ReportData) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Scores against the anchors over time: ``{subject: {anchor: [measurement, ...]}}``."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for subject in SUBJECTS:
        prefix = score_kind(subject, "")
        for kind, rows in sorted(data.anchors.items()):
            if kind.startswith(prefix) and rows:
                out.setdefault(subject, {})[kind[len(prefix):]] = rows
    return out


def anchor_elos(data: ReportData) -> dict[str, list[dict[str, Any]]]:
    """Anchored Elo over time: ``{subject: [measurement, ...]}``."""
    return {subject: data.anchors[elo_kind(subject)] for subject in SUBJECTS if data.anchors.get(elo_kind(subject))}


def fig_anchors(data: ReportData):
    plt = _plt()
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(12, 4.2))
    clock = _Clock(data)
    scores, elos = anchor_scores(data), anchor_elos(data)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    anchors = sorted({a for by_anchor in scores.values() for a in by_anchor})
    style = {"published": ("-", "o", "published Nash mixture"), "newest_main": ("--", "s", "newest main agent"),
             "published_search": (":", "^", "published mixture with search")}
    for subject, by_anchor in scores.items():
        ls, marker, what = style[subject]
        for anchor, rows in by_anchor.items():
            v = np.array([m["value"] for m in rows], dtype=float)
            ci = np.array([m.get("ci95", [m["value"], m["value"]]) for m in rows], dtype=float)
            ax_s.errorbar(clock([m["time"] for m in rows]), v, yerr=[v - ci[:, 0], ci[:, 1] - v], ls=ls,
                          marker=marker, ms=3, capsize=2, color=colors[anchors.index(anchor) % len(colors)],
                          label=f"{what} vs {anchor}")
    if scores:
        ax_s.set_ylim(-0.02, 1.02)
        ax_s.axhline(0.5, color="0.5", ls=":", lw=1)
        ax_s.set_xlabel(clock.label)
        ax_s.set_ylabel("score (win 1, draw 0.5, loss 0)")
        ax_s.grid(alpha=0.3)
        ax_s.legend(fontsize=8, loc="best")
    else:
        _no_data(ax_s, "no anchors in this run's config")
    ax_s.set_title("Score against fixed anchors (95% CI)")
    for subject, rows in elos.items():
        ls, marker, what = style[subject]
        ax_e.plot(clock([m["time"] for m in rows]), [m["value"] for m in rows], ls=ls, marker=marker, ms=3,
                  color="#1f77b4" if subject == "published" else "#d62728", label=what)
    if elos:
        ax_e.set_xlabel(clock.label)
        ax_e.set_ylabel("Elo")
        ax_e.grid(alpha=0.3)
        ax_e.legend(fontsize=8, loc="best")
    else:
        _no_data(ax_e, "no rated anchor")
    ax_e.set_title("Elo anchored on the anchors' fixed ratings")
    fig.tight_layout()
    return fig, bool(scores)


FIGURES: dict[str, tuple[str, Callable]] = {
    "payoff": ("Payoff heatmap", fig_payoff),
    "nash": ("Nash mixture over time", fig_nash),
    "elo": ("Elo curves", fig_elo),
    "exploitability": ("Exploitability", fig_exploitability),
    "lineage": ("Lineage", fig_lineage),
    "objective": ("Objective across k opponents", fig_objective),
    "anchors": ("Strength against fixed anchors", fig_anchors),
}


def _png(fig) -> str:
    plt = _plt()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", pad_inches=0.15)  # long tick labels stay in
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


# -- HTML -----------------------------------------------------------------------
def summary(data: ReportData) -> dict[str, Any]:
    nash = data.latest_nash
    elo_now: dict[str, float] = {}
    for _, agent, _, rating in data.elo_history:
        elo_now[agent] = rating
    return {
        "game": data.game,
        "storage": data.db_path,
        "pool_size": len(data.agents),
        "pool_by_role": pool_by_role(data),
        "evicted": len(data.removed),
        "snapshots_total": len(data.agents) + len(data.removed),
        "resets": sum(1 for e in data.events if e["kind"] == "reset"),
        "counters": dict(sorted(data.counters.items())),
        "learners": [{**{k: l[k] for k in ("learner_id", "role", "version", "step")},
                      "snapshots": l["info"].get("snapshots"), "resets": l["info"].get("resets"),
                      "elo": elo_now.get(l["learner_id"])} for l in data.learners],
        "nash": None if nash is None else {
            "solved_at": nash["solved_at"], "solves": len(data.nash), "method": nash["method"],
            "entropy": nash["entropy"], "meta_exploitability": nash["meta_exploitability"],
            "support": dict(nash_support(data)),
        },
        "exact": data.exact,
        "anchors": {subject: {anchor: {k: rows[-1].get(k) for k in ("time", "value", "ci95", "games", "pool_version")}
                              for anchor, rows in by_anchor.items()}
                    for subject, by_anchor in anchor_scores(data).items()},
        "anchor_elo": {subject: rows[-1]["value"] for subject, rows in anchor_elos(data).items()},
        "objective": {learner: {"outcome_novelty": rows[-1].get("outcome_novelty", rows[-1]["value"]),
                                "reward_gap": rows[-1].get("reward_gap", 0.0),
                                "k_opponents": rows[-1].get("k_opponents", 1), "shaper": rows[-1].get("shaper"),
                                "skipped_updates": sum(1 for e in data.events if e["kind"] == "shaper_error"
                                                       and e.get("learner_id") == learner)}
                      for learner, rows in objective_by_learner(data).items()},
    }


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
            return f"{int(x):,}"
        return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _when(t: float | None) -> str:
    return "–" if not t else dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: list[tuple[str, str]]) -> str:
    return "<table class='kv'>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def render_html(data: ReportData, figures: dict[str, tuple[str, bool]]) -> str:
    s = summary(data)
    e = html.escape
    rows = [("game", e(str(data.game))), ("store", e(data.db_path)),
            ("started", e(_when(data.created_at))), ("last activity", e(_when(data.t1()))),
            ("pool size", f"<span id='pool-size'>{s['pool_size']}</span> ("
             + ", ".join(f"{e(r)}: <span id='pool-{e(r)}'>{c}</span>" for r, c in s["pool_by_role"].items()) + ")"),
            ("snapshots taken / evicted", f"{s['snapshots_total']} / {s['evicted']}"),
            ("learner resets", str(s["resets"]))]
    rows += [(e(name), f"<span id='counter-{e(name)}'>{_fmt(v)}</span>") for name, v in s["counters"].items()]
    nash = s["nash"]
    if nash:
        rows += [("Nash solved", f"{e(_when(nash['solved_at']))} ({nash['solves']} solves, {e(nash['method'])})"),
                 ("Nash entropy", f"{nash['entropy']:.4f} nats"),
                 ("meta-exploitability (inside the pool only)", f"{nash['meta_exploitability']:.4g}"),
                 ("Nash support size", f"<span id='support-size'>{len(nash['support'])}</span>")]
    else:
        rows.append(("Nash", "not solved yet"))
    exact = data.exact
    if "nash_conv" in exact:
        rows.append(("NashConv of the latest Nash mixture (exact, now)",
                     f"<span id='nash-conv'>{exact['nash_conv']:.6f}</span> (exploitability "
                     f"{exact['exploitability']:.6f}; {exact['members']} members, {exact['seconds']:.1f} s)"))
    else:
        rows.append(("NashConv (exact)", e(exact.get("skipped", "not computed"))))
    if data.probe:
        p = data.probe[-1]
        low, high = p.get("ci95", [p["value"], p["value"]])
        rows.append(("best-response probe, latest (lower bound on exploitability)",
                     f"<span id='probe'>{p['value']:+.4f}</span> [{low:.4f}, {high:.4f}] "
                     f"({_fmt(p.get('steps', 0))} training steps, {e(_when(p['time']))})"))
    what = {"published": "published Nash mixture", "newest_main": "newest main agent",
            "published_search": "published mixture with search"}
    for subject, by_anchor in s["anchors"].items():
        elo = s["anchor_elo"].get(subject)
        rows.append((f"score vs anchors, latest ({what[subject]})", ", ".join(
            f"{e(a)} <span id='anchor-{e(subject)}-{e(a)}'>{m['value']:.3f}</span> "
            f"[{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]" for a, m in by_anchor.items())
            + (f"; anchored Elo <span id='anchor-elo-{e(subject)}'>{elo:.0f}</span>" if elo is not None else "")))
    support_rows = "".join(f"<tr><td>{e(a)}</td><td>{w:.4f}</td></tr>" for a, w in (nash or {}).get("support", {}).items())
    learner_rows = "".join(
        "<tr>" + "".join(f"<td>{e(_fmt(l[k]))}</td>" for k in ("learner_id", "role", "version", "step", "snapshots",
                                                               "resets", "elo")) + "</tr>"
        for l in s["learners"])
    body = [f"<h1>nash-league report: {e(str(data.game))}</h1>",
            f"<p class='muted'>{e(data.run_dir)} · generated {e(_when(time.time()))}</p>",
            "<h2 id='summary'>Summary</h2>", _table(rows)]
    if learner_rows:
        body += ["<h3>Learners</h3><table class='grid'><tr><th>learner</th><th>role</th><th>version</th>"
                 "<th>step</th><th>snapshots</th><th>resets</th><th>Elo</th></tr>", learner_rows, "</table>"]
    if s["objective"]:
        body += ["<h3>Objective (latest per learner)</h3><table class='grid' id='objective'><tr><th>learner</th>"
                 "<th>k opponents</th><th>shaper</th><th>outcome novelty</th><th>shaped - raw reward</th>"
                 "<th>updates skipped (shaper errors)</th></tr>"]
        body += ["<tr>" + "".join(f"<td>{e(_fmt(v))}</td>" for v in (learner, o["k_opponents"], o["shaper"],
                                                                      o["outcome_novelty"], o["reward_gap"],
                                                                      o["skipped_updates"])) + "</tr>"
                 for learner, o in sorted(s["objective"].items())]
        body.append("</table>")
    if support_rows:
        body += ["<h3>Current Nash support</h3><table class='grid' id='nash-support'><tr><th>agent</th>"
                 "<th>weight</th></tr>", support_rows, "</table>"]
    for key, (title, _) in FIGURES.items():
        png, has_data = figures[key]
        body.append(f"<h2>{e(title)}</h2><img id='fig-{key}' data-has-data='{str(has_data).lower()}' "
                    f"alt='{e(title)}' src='data:image/png;base64,{png}'>")
    payload = json.dumps(s, default=float).replace("</", "<\\/")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>nash-league report: {e(str(data.game))}</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}th,td{padding:2px 10px;text-align:left;"
        "border-bottom:1px solid #ddd;font-size:14px}table.kv th{font-weight:600;color:#444}"
        "img{max-width:100%;border:1px solid #eee;margin:.5em 0}.muted{color:#777}"
        "</style></head><body>\n" + "\n".join(body)
        + f"\n<script type='application/json' id='report-summary'>{payload}</script>\n</body></html>\n"
    )


def build_report(run_dir: str | Path, out: str | Path | None = None, exact: bool = True) -> Path:
    """Read the store in ``run_dir``, draw the figures, write the HTML; returns its path."""
    data = load(run_dir)
    data.exact = exact_nash_conv(data) if exact else {"skipped": "not asked for (--no-exact)"}
    if "skipped" in data.exact:
        log.info("exact NashConv not computed: %s", data.exact["skipped"])
    figures = {}
    for key, (_, draw) in FIGURES.items():
        fig, has_data = draw(data)
        figures[key] = (_png(fig), has_data)
    out = Path(out) if out is not None else Path(run_dir) / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_html(data, figures), encoding="utf-8")
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m monitoring.report",
                                     description="Write a self-contained HTML report of a league run.")
    parser.add_argument("--storage", required=True, metavar="RUN_DIR", help="the run's storage folder (or its league.db)")
    parser.add_argument("--out", metavar="FILE", help="where to write the HTML (default RUN_DIR/report.html)")
    parser.add_argument("--no-exact", action="store_true", help="skip computing the exact NashConv now")
    args = parser.parse_args(argv)
    default_out = Path(args.storage).parent if Path(args.storage).suffix == ".db" else Path(args.storage)
    try:
        out = build_report(args.storage, args.out or default_out / "report.html", exact=not args.no_exact)
    except ReportError as exc:
        return fail(exc.what, exc.why)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
