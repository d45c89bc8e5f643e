"""experiments.search_alone: the search learner in one process, as its command line runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.search_alone", *args], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=300)


def test_it_trains_on_tic_tac_toe_and_scores_the_greedy_network_against_each_anchor():
    out = run("--config", "configs/tic_tac_toe.yaml", "--minutes", "0.15", "--games", "10", "--anchor", "mcts:10",
              "--anchor", "uniform", "rollout.envs_per_worker=64", "rollout.steps_per_batch=512")
    assert out.returncode == 0, out.stderr[-2000:]
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["updates"] >= 1 and line["games"] > 0 and line["positions_per_s"] > 0
    for anchor in ("mcts:10", "uniform"):  # a score of 10 games: a multiple of 0.05 in [0, 1], inside its interval
        score, (lo, hi) = line[anchor]["score"], line[anchor]["ci95"]
        assert 0.0 <= score <= 1.0 and abs(score * 20 - round(score * 20)) < 1e-6 and lo <= score <= hi


def test_a_game_search_cannot_play_or_a_bad_setting_is_one_line():
    for args, says in ((["--config", "configs/kuhn_poker.yaml"], "nash-league: --config: kuhn_poker: "),
                       (["search_learner.simulations=0"], "nash-league: experiments.search_alone: search_learner"),
                       (["--anchor", "mcts:0"], "nash-league: experiments.search_alone: anchor 'mcts:0'")):
        out = run(*args)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith(says), (args, out.stderr)
