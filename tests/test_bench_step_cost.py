"""bench.step_cost: a worker's lanes against a pool of frozen opponents, without Ray. Checked for what
does not depend on timing: every setting reports, and repeating each drawn opponent over more new
episodes asks fewer distinct frozen policies per vector step."""

import json

import numpy as np
import pytest

from bench import step_cost


def test_step_cost_reports_each_setting_and_repeats_cut_the_distinct_opponents_per_step(capsys):
    assert step_cost.main(["--config", "configs/connect_four_ppo.yaml", "--repeats", "1", "16",
                           "--seconds", "0.3", "--rounds", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by = {line["setting"]: line for line in lines}
    assert set(by) == {"self_play", "league-r1", "league-r16"}
    assert by["self_play"]["distinct_opponents_per_step"] == 0.0 and by["self_play"]["ratio_to_self_play"] == 1.0
    assert all(line["env_steps_per_s"] > 0 and line["pool"] == 150 for line in lines)
    assert 0 < by["league-r16"]["distinct_opponents_per_step"] < by["league-r1"]["distinct_opponents_per_step"] / 2


def test_stored_weights_are_a_runs_last_worker_batches_games_per_opponent(tmp_path):
    """Live: games against the run's learners; frozen: against snapshots, most played first; only
    the last ``batches`` worker batches count, and the evaluator's do not."""
    from league.messages import ResultBatch
    from league.store import LeagueStore

    def batch(source, seq, opponents, games):
        agents = ["main_agent-0", *opponents]
        n = len(games)
        return ResultBatch(source, seq, tuple(agents), np.zeros(n, np.int64), np.arange(1, n + 1),
                           np.asarray(games, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n))

    with LeagueStore(tmp_path) as store:
        store.save_learner("main_agent-0", "main_agent", 3, 1000, None)
        store.record_results(batch("worker:main_agent-0:0", 1, ["main_agent-0-v1"], [500]), None, None, {})
        store.record_results(batch("worker:main_agent-0:0", 2, ["main_agent-0", "main_agent-0-v1", "main_agent-0-v2"],
                                   [30, 10, 20]), None, None, {})
        store.record_results(batch("evaluator:0", 1, ["main_agent-0-v2"], [128]), None, None, {})
        store.record_results(batch("worker:main_agent-0:0", 3, ["main_agent-0", "main_agent-0-v2"], [10, 30]),
                             None, None, {})
    live, frozen = step_cost.stored_weights(tmp_path, batches=2)
    assert live == pytest.approx(40 / 100)  # 30 + 10 live of 100 games in worker batches 2 and 3
    assert frozen.tolist() == pytest.approx([50 / 60, 10 / 60])  # v2: 20 + 30, v1: 10
