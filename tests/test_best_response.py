"""evaluation/best_response.py: the PPO best-response probe against exact best-response values.

Budgets and tolerances (also in docs/envs_policies.md). The probe's estimate
``br_return`` must lie within the stated tolerance of the exact best-response
value (``evaluation.exploitability``, OpenSpiel's game-tree best response), at the
stated training budget (the best response's own decisions) and evaluation
episodes; the exact return of the policy it trained can never exceed that value.

| target                        | game  | steps   | eval episodes | tolerance |
| uniform random                | Kuhn  | 50,000  | 50,000        | 0.03      |
| trained league Nash mixture   | Kuhn  | 100,000 | 50,000        | 0.03      |
| uniform random                | Leduc | 600,000 | 30,000        | 0.10      |
| trained league Nash mixture   | Leduc | 600,000 | 30,000        | 0.20      |
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from envs import make_game
from league.nash import compute_nash_distribution, meta_exploitability
from league.pool import AgentRecord, AgentType
from league.store import LeagueStore
from evaluation.best_response import ProbeConfig, exact_values, mean_ci95, probe, train_best_response
from evaluation.exploitability import expected_returns_matrix, nash_conv_of_mixture, nash_conv_uniform
from policies.net import ActorCritic, PolicySpec
from policies.rollout import EpisodeMixture, collect_rollout
from policies.snapshot import policy_to_bytes

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def trained_league_store(run_dir: Path, game_name: str, iterations: int, steps: int, seed: int = 0) -> dict:
    """A league store holding real PPO-trained snapshots and the exact Nash over them.

    A small PSRO (Lanctot et al. 2017) with the project's PPO: start from one
    fresh network, then repeatedly train a new snapshot against the Nash mixture
    of the snapshots so far, with exact meta-payoffs (seat-averaged expected
    returns). No Ray: the store is what a league run leaves behind, written
    through ``league.store`` as the coordinator writes it.
    """
    game = make_game(game_name, 128, seed=seed)
    torch.manual_seed(seed)
    models = [ActorCritic(PolicySpec(game.obs_size, game.num_actions, (64, 64)))]
    weights = np.ones(1)
    rng = np.random.default_rng(seed)
    for it in range(iterations):
        cfg = ProbeConfig(steps=steps, num_envs=128, hidden=(64, 64), seed=seed + it + 1)
        model, _ = train_best_response(game, EpisodeMixture(models, weights, rng), cfg, rng)
        models.append(model)
        v = expected_returns_matrix(game_name, models, models)  # seat-0 returns
        payoff = 0.5 * (v - v.T)  # row agent's return, averaged over seats
        weights = compute_nash_distribution(payoff)
    with LeagueStore(run_dir) as store:
        store.set_meta("game", game_name)
        store.set_meta("game_params", {})
        ids = []
        for i, m in enumerate(models):
            agent_id = f"main_agent-0-v{i}"
            store.add_agent(AgentRecord(agent_id=agent_id, version=i, agent_type=AgentType.MAIN_AGENT,
                                        learner_id="main_agent-0", step=i * steps), policy_to_bytes(m))
            ids.append(agent_id)
        store.save_nash(0.0, len(ids), ids, weights, 0.0, meta_exploitability(payoff, weights), 0.0, "lp")
    return {"ids": ids, "models": models, "weights": weights}


def run_cli(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "evaluation.best_response", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                                                       "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def check_probe(out: dict, tolerance: float) -> None:
    print(json.dumps(out))  # the figures, with -s
    exact = out["exact_br_return"]
    assert abs(out["br_return"] - exact) <= tolerance, out
    low, high = out["ci95"]
    assert low < out["br_return"] < high
    # the policy it trained is a policy: it cannot do better than the best response
    assert out["trained_exact_return"] <= exact + 1e-9
    assert out["trained_exact_return"] >= exact - tolerance


# ---------------------------------------------------------------- pure pieces
def test_mean_ci95_covers_the_mean_at_the_normal_rate():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        x = rng.normal(1.0, 2.0, size=200)
        low, high = mean_ci95(x)[1]
        hits += low <= 1.0 <= high
    assert abs(hits / 2000 - 0.95) < 0.015


def far_from_uniform(game, k, seed):
    torch.manual_seed(seed)
    models = []
    for _ in range(k):
        m = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,)))
        with torch.no_grad():
            m.policy_head.weight.mul_(300.0)
        models.append(m)
    return models


def test_sampled_returns_against_an_episode_mixture_match_the_exact_value_on_kuhn():
    # One member per episode, not a per-move mix: the sampled mean return of a fixed
    # learner must match the exact value of the per-episode mixture (OpenSpiel tree sums).
    game = make_game("kuhn_poker", 512, seed=3)
    a, b, learner = far_from_uniform(game, 3, seed=5)
    mix = EpisodeMixture([a, b, None], [0.5, 0.3, 0.2], np.random.default_rng(1))
    returns = []
    while sum(map(len, returns)) < 200_000:
        game.reset()
        returns.append(collect_rollout(game, learner, mix, 20_000, np.random.default_rng(len(returns)),
                                       value="return")[1])
    mean, (low, high) = mean_ci95(np.concatenate(returns))
    exact = exact_values("kuhn_poker", [a, b, None], [0.5, 0.3, 0.2], learner, greedy=False)["trained_exact_return"]
    half = (high - low) / 2
    assert abs(mean - exact) < 1.5 * half, (mean, exact, half)  # 1.5 x the 95% half-width: about 3.4 sigma


def test_exact_values_of_a_known_best_response_on_kuhn():
    # uniform random target: the exact best response gains 11/24 per episode on average over seats
    game = make_game("kuhn_poker", 1)
    net = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (8,)))
    out = exact_values("kuhn_poker", [None], [1.0], net, greedy=False)
    assert out["exact_br_return"] == pytest.approx(11 / 24, abs=1e-12)
    assert out["exact_nash_conv"] == pytest.approx(nash_conv_uniform("kuhn_poker")["nash_conv"], abs=1e-12)
    # a near-uniform fresh network against uniform: a zero-sum game's symmetric value, 0
    assert abs(out["trained_exact_return"]) < 0.01


# ---------------------------------------------------------- probe vs exact
def test_probe_of_uniform_kuhn_within_0_03_of_exact_at_50k_steps():
    out = probe("kuhn_poker", [None], [1.0], ProbeConfig(steps=50_000, eval_episodes=50_000, seed=0))
    assert out["exact_br_return"] == pytest.approx(11 / 24)
    check_probe(out, 0.03)


def test_probe_cli_of_a_trained_kuhn_league_within_0_03_of_exact(tmp_path):
    league = trained_league_store(tmp_path / "run", "kuhn_poker", iterations=3, steps=20_000)
    exact = nash_conv_of_mixture("kuhn_poker", league["models"], league["weights"])["exploitability"]
    out = run_cli("--storage", str(tmp_path / "run"), "--steps", "100000", "--eval-episodes", "50000")
    assert out["policy"] == "nash_mixture"
    assert out["exact_br_return"] == pytest.approx(exact, abs=1e-9)
    assert set(out["members"]) == {i for i, w in zip(league["ids"], league["weights"]) if w > 0}
    check_probe(out, 0.03)


def test_probe_cli_of_one_agent_and_of_uniform(tmp_path):
    league = trained_league_store(tmp_path / "run", "kuhn_poker", iterations=1, steps=20_000)
    agent = league["ids"][1]
    out = run_cli("--storage", str(tmp_path / "run"), "--agent", agent, "--steps", "50000",
                  "--eval-episodes", "30000")
    assert out["policy"] == f"agent:{agent}"
    assert out["exact_br_return"] == pytest.approx(
        nash_conv_of_mixture("kuhn_poker", [league["models"][1]], [1.0])["exploitability"], abs=1e-9)
    check_probe(out, 0.04)
    out = run_cli("--uniform", "--game", "kuhn_poker", "--steps", "30000", "--eval-episodes", "30000")
    assert out["policy"] == "uniform" and out["exact_br_return"] == pytest.approx(11 / 24)


def test_probe_cli_refuses_bad_input_with_one_line(tmp_path):
    for args, needle in ((["--storage", str(tmp_path / "none")], "no league store"),
                         (["--uniform", "--game", "no_such_game"], "no_such_game")):
        proc = subprocess.run([sys.executable, "-m", "evaluation.best_response", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO)})
        last = proc.stderr.strip().splitlines()[-1]  # after what OpenSpiel's C++ writes of an unknown game
        assert proc.returncode == 2 and last.startswith("nash-league: ") and needle in last, proc.stderr


@pytest.mark.slow
def test_probe_of_uniform_leduc_within_0_1_of_exact_at_600k_steps():
    out = probe("leduc_poker", [None], [1.0], ProbeConfig(steps=600_000, eval_episodes=30_000, seed=0))
    assert out["exact_br_return"] == pytest.approx(nash_conv_uniform("leduc_poker")["exploitability"])
    check_probe(out, 0.10)


@pytest.mark.slow
def test_probe_cli_of_a_trained_leduc_league_within_0_2_of_exact(tmp_path):
    league = trained_league_store(tmp_path / "run", "leduc_poker", iterations=3, steps=50_000)
    out = run_cli("--storage", str(tmp_path / "run"), "--steps", "600000", "--eval-episodes", "30000")
    exact = nash_conv_of_mixture("leduc_poker", league["models"], league["weights"])["exploitability"]
    assert out["exact_br_return"] == pytest.approx(exact, abs=1e-9)
    check_probe(out, 0.20)
