"""The league scores itself against fixed anchors: the launcher as users run it (subprocess, the
shipped smoke config on tic-tac-toe with a uniform and an MCTS-10 anchor), the scores on /status
over real HTTP, in the store, and on the progress line."""

from __future__ import annotations

import math
import sys

import pytest
import requests

from league.anchors import SUBJECTS, anchored_elo, elo_kind, score_kind
from league.store import LeagueStore
from test_launch import run_until

PORT = 8131
ANCHORS = ["uniform", "mcts:10"]
GAMES = 20

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_tic_tac_toe_league_scores_its_mixture_and_newest_main_against_anchors(tmp_path):
    cmd = [sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", f"run.storage={tmp_path}",
           "game.name=tic_tac_toe", "run.max_minutes=3", f"serve.port={PORT}", "evaluator.probe_every_seconds=0",
           f"anchors=[{', '.join(ANCHORS)}]", 'anchor_elo={"mcts:10": 1400}', "evaluator.anchor_every_seconds=2",
           f"evaluator.anchor_games={GAMES}", "run.progress_every_seconds=2"]

    def anchors_shown(line):
        if "vs anchors" not in line:
            return None
        s = requests.get(f"http://127.0.0.1:{PORT}/status", timeout=30).json()
        a = s["quality"].get("anchors", {})
        return s if all(set(a.get(subject, {})) == set(ANCHORS) for subject in SUBJECTS) else None

    code, text, status = run_until(cmd, anchors_shown)
    assert code == 0, text[-3000:]
    assert status is not None, text[-3000:]
    shown = status["quality"]["anchors"]
    with LeagueStore(tmp_path, create=False) as store:
        for subject in SUBJECTS:
            rated = []
            for anchor in ANCHORS:
                m = shown[subject][anchor]
                assert 0.0 <= m["value"] <= 1.0 and m["games"] == GAMES
                assert m["anchor"] == anchor and m["subject"] == subject
                assert m["ci95"][0] <= m["value"] <= m["ci95"][1]
                # what /status showed is a measurement in the store, exactly
                assert m in store.measurements(score_kind(subject, anchor))
                rated.append(({"uniform": 1000.0, "mcts:10": 1400.0}[anchor], m["value"], m["games"]))
            elo = shown["elo"][subject]
            assert elo in store.measurements(elo_kind(subject))
            if elo["time"] >= max(shown[subject][a]["time"] for a in ANCHORS):  # the same round's rating
                assert elo["value"] == pytest.approx(anchored_elo(rated), abs=1e-6)
            assert math.isfinite(elo["value"])
        newest = [a for a in store.agents(include_removed=True) if a.agent_type.value == "main_agent"]
        assert shown["newest_main"]["uniform"]["agents"][0] in {a.agent_id for a in newest}
        # the anchors never enter the pool, the payoff or matchmaking
        assert not any(a.agent_id in ANCHORS for a in store.agents(include_removed=True))
