"""The HTML report of a league (monitoring/report.py), from a store built with
the plain League object and real tiny ActorCritic snapshots on Kuhn poker."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from envs import game_info
from league.config import load_config
from league.league import League
from league.messages import Result, ResultBatch
from league.store import LeagueStore
from monitoring import report
from evaluation.exploitability import nash_conv_of_mixture
from policies.net import ActorCritic, PolicySpec
from policies.snapshot import policy_to_bytes

GAME = "kuhn_poker"
FIGURES = ("payoff", "nash", "elo", "exploitability", "lineage", "objective", "anchors")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def league_run(tmp_path_factory):
    """Three rounds of snapshots from every learner into a pool capped at 6
    (so some are evicted and the main exploiter resets), meta-payoffs through
    ``record_exact``, a Nash solve and a few live results per round.

    The meta-payoffs are cyclic, 1/2 + 0.3 sin(2 pi (theta_a - theta_b)), not the
    nets' exact Kuhn scores: random tiny nets on Kuhn are transitive (one
    dominates, the Nash is pure), and the report must be checked on a mixture
    whose support changes over time. The NashConv is still the nets' exact one."""
    run = tmp_path_factory.mktemp("league")
    info = game_info(GAME)
    assert (info.obs_size, info.num_actions) == (11, 2)
    cfg = load_config(None, [f"run.storage={run}", "league.pool_max_size=6"])
    store = LeagueStore(run)
    store.set_meta("game", GAME)
    league = League(cfg, store, seed=0)
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    models: dict[str, ActorCritic] = {}
    theta: dict[str, float] = {}
    seq = 0
    for round_ in range(3):
        for learner_id in list(league.learners):
            model = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(8,)))
            with torch.no_grad():  # sharper than the near-uniform init, so members differ
                for param in model.parameters():
                    param.mul_(4.0)
            record, _ = league.add_snapshot(learner_id, policy_to_bytes(model), step=1000 * (round_ + 1))
            models[record.agent_id] = model
            theta[record.agent_id] = rng.uniform()
        ids = league.pool.ids()
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                league.record_exact(a, b, 0.5 + 0.3 * np.sin(2 * np.pi * (theta[a] - theta[b])))
        results = [Result(l, str(rng.choice(ids)), float(rng.integers(0, 5)) / 4) for l in league.learners for _ in range(20)]
        seq += 1
        league.report_results(ResultBatch.from_results("worker-0", seq, results, env_steps=len(results) * 3))
        league.solve_nash()
        support = league.nash.support()
        value = nash_conv_of_mixture(GAME, [models[a] for a in support], list(support.values()))["nash_conv"]
        store.add_measurement("nash_conv", value)
        for i, learner_id in enumerate(league.learners):  # as a learner records its objective (actors/learner.py)
            novelty, gap = 0.1 * (round_ + 1) + i, -0.5 * i
            store.add_measurement("objective", novelty, {"learner": learner_id, "role": learner_id.rsplit("-", 1)[0],
                                                         "outcome_novelty": novelty, "reward_gap": gap,
                                                         "k_opponents": 1 + i, "shaper": "novelty" if i else None})
    store.add_event("shaper_error", {"learner_id": "main_exploiter-0", "error": "shaper raised RuntimeError: x"})
    support = league.nash.support()
    assert len(support) >= 2, support  # the fixture is meant to hold a mixed Nash
    expected_nash_conv = nash_conv_of_mixture(GAME, [models[a] for a in support], list(support.values()))["nash_conv"]
    # a real (small) best-response probe of the final mixture, recorded as the prober records it
    from evaluation.best_response import ProbeConfig, probe

    probed = probe(GAME, [models[a] for a in support], list(support.values()),
                   ProbeConfig(steps=4000, eval_episodes=2000, num_envs=64))
    store.add_measurement("probe_br_return", probed["br_return"], {"ci95": probed["ci95"], "steps": probed["steps"]})
    # two real rounds against the uniform anchor, recorded as the anchor judge records them
    from league.anchors import anchored_elo, elo_kind, score_kind
    from evaluation.anchors import score_against

    newest_main = [a for a in league.pool.ids() if a.startswith("main_agent")][-1]
    subjects = {"published": ([models[a] for a in support], list(support.values())),
                "newest_main": ([models[newest_main]], [1.0])}
    for round_ in range(2):
        for subject, (members, weights) in subjects.items():
            res = score_against(GAME, None, members, weights, "uniform", games=200, seed=round_)
            store.add_measurement(score_kind(subject, "uniform"), res["score"],
                                  {"anchor": "uniform", "subject": subject, "ci95": res["ci95"], "games": 200})
            store.add_measurement(elo_kind(subject), anchored_elo([(1000.0, res["score"], 200)]), {"subject": subject})
    store.close()
    out = report.build_report(run)
    return {"run": run, "html": out.read_text(encoding="utf-8"), "league": league, "newest_main": newest_main,
            "nash_conv": expected_nash_conv, "probe": probed}


def _images(html: str) -> dict[str, tuple[np.ndarray, bool]]:
    import matplotlib.image as mpimg

    out = {}
    for m in re.finditer(r"<img id='fig-(\w+)' data-has-data='(true|false)'[^>]* src='data:image/png;base64,([^']+)'",
                         html):
        out[m.group(1)] = (mpimg.imread(io.BytesIO(base64.b64decode(m.group(3))), format="png"), m.group(2) == "true")
    return out


def _summary(html: str) -> dict:
    m = re.search(r"<script type='application/json' id='report-summary'>(.*?)</script>", html, re.S)
    assert m, "report has no summary JSON block"
    return json.loads(m.group(1))


def test_report_is_self_contained_html_with_every_figure_drawn_from_data(league_run):
    html = league_run["html"]
    assert (league_run["run"] / "report.html").is_file()
    assert html.startswith("<!DOCTYPE html>")
    # no external assets: every src is inline data, no links to stylesheets or scripts
    assert not re.search(r"(src|href)=['\"](?!data:)", html)
    images = _images(html)
    assert set(images) == set(FIGURES)
    for key, (img, has_data) in images.items():
        assert has_data, f"figure {key} says it had no data"
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300, key
        assert img[..., :3].std() > 0.01, f"figure {key} is a blank image"


def test_report_summary_matches_the_store(league_run):
    run, league = league_run["run"], league_run["league"]
    summary = _summary(league_run["html"])
    with LeagueStore(run, create=False) as store:
        agents = store.agents()
        everyone = store.agents(include_removed=True)
        evictions = store.events("evict")
        resets = store.events("reset")
        counters = store.counters()
        latest = store.latest_nash()
    assert summary["game"] == GAME
    assert summary["pool_size"] == len(agents) == len(league.pool)
    by_role = {r: sum(1 for a in agents if a.agent_type.value == r) for r in report.ROLE_ORDER}
    assert summary["pool_by_role"] == by_role
    assert summary["evicted"] == len(everyone) - len(agents) == len(evictions) > 0
    assert len(everyone) == 3 * len(league.learners)
    assert summary["resets"] == len(resets) >= 3  # the main exploiter resets after every snapshot
    assert summary["counters"]["games"] == counters["games"] == 3 * 4 * 20
    assert summary["counters"]["env_steps"] == counters["env_steps"] == 3 * 4 * 20 * 3
    support = {a: w for a, w in zip(latest["ids"], latest["weights"]) if w > 1e-9}
    assert summary["nash"]["support"] == pytest.approx(support, abs=1e-12)
    assert summary["nash"]["entropy"] == pytest.approx(latest["entropy"])
    # the visible table says the same
    assert re.search(rf"<span id='pool-size'>{len(agents)}</span>", league_run["html"])
    assert re.search(rf"<span id='support-size'>{len(support)}</span>", league_run["html"])


def test_report_nash_conv_equals_a_direct_exact_computation(league_run):
    summary = _summary(league_run["html"])
    exact = summary["exact"]
    assert exact["nash_conv"] == pytest.approx(league_run["nash_conv"], abs=1e-9)
    assert exact["exploitability"] == pytest.approx(league_run["nash_conv"] / 2, abs=1e-9)
    assert exact["uniform"] == pytest.approx(11 / 12, abs=1e-9)  # OpenSpiel's known value for Kuhn
    shown = re.search(r"<span id='nash-conv'>([0-9.]+)</span>", league_run["html"])
    assert shown and float(shown.group(1)) == pytest.approx(league_run["nash_conv"], abs=1e-6)


def test_payoff_matrix_is_the_expected_score_in_both_orientations(league_run):
    data = report.load(league_run["run"])
    ids = [a["agent_id"] for a in data.agents]
    m = report.payoff_matrix(data, ids)
    off = ~np.eye(len(ids), dtype=bool)
    assert np.all(np.isnan(np.diag(m)))
    np.testing.assert_allclose(m[off] + m.T[off], 1.0, atol=1e-9)
    payoff = league_run["league"].payoff
    for i, a in enumerate(ids):
        for j, b in enumerate(ids):
            if i != j:
                assert m[i, j] == pytest.approx(payoff.win_rate(a, b), abs=1e-9)


def test_empty_league_renders_every_figure_as_no_data(tmp_path):
    LeagueStore(tmp_path).close()
    out = report.build_report(tmp_path, tmp_path / "young.html")
    html = out.read_text(encoding="utf-8")
    images = _images(html)
    assert set(images) == set(FIGURES)
    for key, (img, has_data) in images.items():
        assert not has_data, key
        assert img[..., :3].std() > 0, f"figure {key} is a blank image (no 'no data yet' text)"
    summary = _summary(html)
    assert summary["pool_size"] == 0 and summary["nash"] is None
    assert "skipped" in summary["exact"]


def test_cli_missing_store_exits_2_with_one_line(tmp_path):
    missing = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, "-m", "monitoring.report", "--storage", str(missing)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no league store" in lines[0] and str(missing) in lines[0]
    assert not (missing / "league.db").exists()  # the report never creates a store


def test_cli_corrupt_store_exits_2_with_one_line(tmp_path, capsys):
    (tmp_path / "league.db").write_bytes(b"this is not sqlite" * 100)
    assert report.main(["--storage", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable nash-league store" in err[0]


def test_report_shows_the_latest_probe_beside_meta_exploitability(league_run):
    html_text, probed = league_run["html"], league_run["probe"]
    shown = re.search(r"<span id='probe'>([^<]+)</span> \[([^,]+), ([^\]]+)\]", html_text)
    assert shown, "the summary has a probe row"
    assert float(shown.group(1)) == pytest.approx(probed["br_return"], abs=5e-5)
    assert [float(shown.group(2)), float(shown.group(3))] == pytest.approx(probed["ci95"], abs=5e-5)
    assert "meta-exploitability (inside the pool only)" in html_text


def test_report_shows_each_learners_latest_objective_and_its_skipped_updates(league_run):
    s = _summary(league_run["html"])
    ids = list(league_run["league"].learners)
    assert set(s["objective"]) == set(ids)
    for i, learner_id in enumerate(ids):
        o = s["objective"][learner_id]
        assert o["outcome_novelty"] == pytest.approx(0.3 + i) and o["reward_gap"] == pytest.approx(-0.5 * i)
        assert o["k_opponents"] == 1 + i and o["skipped_updates"] == (learner_id == "main_exploiter-0")
    assert "<table class='grid' id='objective'>" in league_run["html"]


def test_report_shows_the_latest_anchor_scores_and_anchored_elo_of_the_store(league_run):
    from league.anchors import elo_kind, score_kind

    summary, html = _summary(league_run["html"]), league_run["html"]
    with LeagueStore(league_run["run"], create=False) as store:
        for subject in ("published", "newest_main"):
            rows = store.measurements(score_kind(subject, "uniform"))
            assert len(rows) == 2
            shown = summary["anchors"][subject]["uniform"]
            assert shown["value"] == rows[-1]["value"] and shown["ci95"] == rows[-1]["ci95"]
            assert 0.0 <= shown["value"] <= 1.0
            elo = store.latest_measurement(elo_kind(subject))["value"]
            assert summary["anchor_elo"][subject] == pytest.approx(
                1000 + 400 * np.log10(shown["value"] / (1 - shown["value"])))
            assert elo == summary["anchor_elo"][subject]
            assert re.search(rf"<span id='anchor-{subject}-uniform'>{shown['value']:.3f}</span>", html)
