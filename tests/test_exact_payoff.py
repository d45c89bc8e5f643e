"""Exact meta-game payoffs from terminal reach vectors against OpenSpiel's tree walk."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from open_spiel.python.algorithms import expected_game_score

from envs import game_info
from evaluation.exploitability import (
    expected_returns,
    expected_returns_matrix,
    info_states,
    reach_vector,
    returns_from_reach,
    table_reach,
    tabular_policy,
    terminals,
)
from policies.net import ActorCritic, GreedyPolicy, PolicySpec
from policies.snapshot import policy_to_bytes

GAMES = ["kuhn_poker", "leduc_poker"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_models(game_name, scales=(1.0, 5.0, 300.0), seed=0):
    """Networks from mildly to sharply non-uniform, one per scale."""
    info = game_info(game_name)
    torch.manual_seed(seed)
    models = []
    for scale in scales:
        m = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(16,)))
        with torch.no_grad():
            m.policy_head.weight.mul_(scale)
        models.append(m)
    return models


def openspiel_value(game_name, seat0_model, seat1_model):
    game = info_states(game_name).game
    pols = [tabular_policy(game_name, seat0_model), tabular_policy(game_name, seat1_model)]
    return np.asarray(expected_game_score.policy_value(game.new_initial_state(), pols), dtype=np.float64)


@pytest.mark.parametrize("game_name", GAMES)
def test_matrix_equals_openspiel_policy_value_entry_by_entry(game_name):
    rows = random_models(game_name, seed=1) + [None]
    cols = [None] + random_models(game_name, scales=(2.0, 50.0), seed=2)
    matrix = expected_returns_matrix(game_name, rows, cols)
    assert matrix.shape == (len(rows), len(cols))
    for i, a in enumerate(rows):
        for j, b in enumerate(cols):
            ref = openspiel_value(game_name, a, b)
            assert ref[0] + ref[1] == pytest.approx(0.0, abs=1e-12)
            assert matrix[i, j] == pytest.approx(ref[0], abs=1e-9)
    assert np.ptp(matrix) > 0.1  # the models really differ


@pytest.mark.parametrize("game_name", GAMES)
def test_expected_returns_keeps_its_zero_sum_pair(game_name):
    a, b = random_models(game_name, scales=(3.0, 3.0), seed=3)
    out = expected_returns(game_name, a, b)
    assert out.shape == (2,)
    np.testing.assert_allclose(out, openspiel_value(game_name, a, b), atol=1e-9)
    assert out[0] == -out[1]


def test_uniform_against_uniform_in_kuhn():
    """Not 0: seat 0 wins 1/8 on average (OpenSpiel agrees)."""
    v = expected_returns_matrix("kuhn_poker", [None], [None])[0, 0]
    assert v == pytest.approx(openspiel_value("kuhn_poker", None, None)[0], abs=1e-12)
    assert v == pytest.approx(1 / 8, abs=1e-12)


def kuhn_nash_table(alpha):
    """A Kuhn Nash equilibrium (Kuhn 1950) in ``info_states`` row order.

    Actions: 0 pass/fold, 1 bet/call. Seat 0 bets J with alpha, K with 3 alpha,
    calls with Q with alpha + 1/3; seat 1 bets J after a pass with 1/3 and
    calls with Q with 1/3; everything else is pure."""
    bet = {
        "0": alpha, "1": 0.0, "2": 3 * alpha, "0pb": 0.0, "1pb": alpha + 1 / 3, "2pb": 1.0,
        "0p": 1 / 3, "1p": 0.0, "2p": 1.0, "0b": 0.0, "1b": 1 / 3, "2b": 1.0,
    }
    keys = info_states("kuhn_poker").keys
    return np.array([[1 - bet[k], bet[k]] for k in keys])


@pytest.mark.parametrize("alpha", [0.0, 0.2, 1 / 3])
def test_kuhn_nash_is_worth_minus_one_eighteenth_to_seat_zero(alpha):
    table = kuhn_nash_table(alpha)[None]
    r0, r1 = table_reach("kuhn_poker", table, 0), table_reach("kuhn_poker", table, 1)
    assert returns_from_reach("kuhn_poker", r0, r1)[0, 0] == pytest.approx(-1 / 18, abs=1e-12)
    assert returns_from_reach("kuhn_poker", r0[0], r1[0]) == pytest.approx(-1 / 18, abs=1e-12)


@pytest.mark.parametrize("game_name", GAMES)
def test_terminal_probabilities_are_complete(game_name):
    """c(h) sums to 1 over each joint sequence of decisions' chance outcomes,
    so sum_h c(h) R0(h) R1(h) = 1 for any profile. (Sum of c(h) alone is the
    number of action sequences per deal: 5 in Kuhn, not 1.)"""
    term = terminals(game_name)
    assert np.all(term.chance > 0)
    for a, b in [(None, None)] + [tuple(random_models(game_name, scales=(4.0, 4.0), seed=4))]:
        total = np.sum(term.chance * reach_vector(game_name, a, 0) * reach_vector(game_name, b, 1))
        assert total == pytest.approx(1.0, abs=1e-12)


def test_terminal_counts():
    assert len(terminals("kuhn_poker").chance) == 30
    assert len(terminals("leduc_poker").chance) == 5520


@pytest.mark.parametrize("game_name", GAMES)
def test_reach_vector_follows_parameter_updates(game_name):
    model = random_models(game_name, scales=(3.0,), seed=5)[0]
    before = reach_vector(game_name, model, 0).copy()
    with torch.no_grad():
        model.policy_head.bias.add_(torch.linspace(-3.0, 3.0, model.spec.num_actions))
    assert np.abs(reach_vector(game_name, model, 0) - before).max() > 0.01


@pytest.mark.parametrize("game", GAMES)
def test_evaluator_exact_score_is_both_seats_of_the_exact_payoff(game, tmp_path):
    """The evaluator's cached reach vectors give the same score as the tree walk."""
    from actors.evaluator import EvaluatorImpl
    from league.config import load_config

    info = game_info(game)
    models = {}
    for i, name in enumerate(("a", "b")):
        torch.manual_seed(10 + i)
        models[name] = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(16,)))
        for prm in models[name].parameters():
            prm.data.normal_(0, 1)
    ev = EvaluatorImpl("evaluator:0", load_config(None, [f"game.name={game}", f"run.storage={tmp_path}"]), None)
    for name, model in models.items():
        ev.cache.put(name, model)
    lo, hi = ev.lo, ev.hi
    game_state = info_states(game).game.new_initial_state()
    pol = {k: tabular_policy(game, m) for k, m in models.items()}
    v_ab = expected_game_score.policy_value(game_state, [pol["a"], pol["b"]])[0]
    v_ba = expected_game_score.policy_value(game_state, [pol["b"], pol["a"]])[1]
    want = 0.5 * ((v_ab - lo) / (hi - lo) + (v_ba - lo) / (hi - lo))
    assert ev.exact_score("a", "b") == pytest.approx(want, abs=1e-9)
    assert ev.exact_score("a", "b") + ev.exact_score("b", "a") == pytest.approx(1.0, abs=1e-9)


def test_evaluator_leaves_out_pairs_without_a_finite_score(tmp_path):
    from actors.evaluator import EvaluatorImpl
    from league.config import load_config

    info = game_info("kuhn_poker")
    good, bad = (ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(8,))) for _ in range(2))
    for prm in bad.parameters():
        prm.data.fill_(float("nan"))  # a diverged snapshot
    ev = EvaluatorImpl("evaluator:0", load_config(None, [f"run.storage={tmp_path}"]), None)
    for name, model in {"good": good, "good2": good, "bad": bad}.items():
        ev.cache.put(name, model)
    scores = ev.exact_scores([("good", "bad"), ("good", "good2")])
    assert [(a, b) for a, b, _ in scores] == [("good", "good2")]
    assert scores[0][2] == pytest.approx(0.5)


@pytest.mark.parametrize("game", ["biased_rps", "kuhn_poker"])
def test_evaluator_sampled_games_agree_with_its_exact_score(game, tmp_path):
    """The sampled path (the rollout workers' stepping kernel) estimates the score
    the exact path computes: within 4 standard errors of 1024 games."""
    from actors.evaluator import EvaluatorImpl
    from league.config import load_config

    info = game_info(game)
    ev = EvaluatorImpl("evaluator:1", load_config(None, [f"game.name={game}", f"run.storage={tmp_path}",
                                                         "evaluator.games_per_pair=1024"]), None, index=1)
    assert ev.exact and not ev.measures_exploitability  # evaluator 0 measures it by default
    for i, name in enumerate(("a", "b")):
        torch.manual_seed(20 + i)
        model = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(16,)))
        for prm in model.parameters():
            prm.data.normal_(0, 1)
        ev.cache.put(name, model)
    results = ev.sampled_results("a", "b")
    assert len(results) == 1024 and {(r.a, r.b) for r in results} == {("a", "b")}
    scores = np.array([r.score for r in results])
    want = ev.exact_score("a", "b")
    assert 0.05 < want < 0.95
    assert abs(scores.mean() - want) < 4 * scores.std() / np.sqrt(len(scores)) + 1e-9


def _greedy_networks(game: str, seeds, hidden=(16,)) -> dict[str, GreedyPolicy]:
    info = game_info(game)
    out = {}
    for seed in seeds:
        torch.manual_seed(seed)
        model = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=hidden))
        for prm in model.parameters():
            prm.data.normal_(0, 1)
        out[f"g{seed}"] = GreedyPolicy(model).eval()
    return out


def test_settled_score_of_greedy_snapshots_is_the_exact_score(tmp_path):
    """Tic-tac-toe, where the tree gives the exact score: a greedy pair's two games, one a seat, say it."""
    from actors.evaluator import EvaluatorImpl
    from league.config import load_config

    ev = EvaluatorImpl("evaluator:0", load_config(None, ["game.name=tic_tac_toe", f"run.storage={tmp_path}",
                                                         "policy.snapshot_play=greedy"]), None)
    assert ev.exact and ev.settled
    nets = _greedy_networks("tic_tac_toe", range(30, 38))
    for name, model in nets.items():
        ev.cache.put(name, model)
    names = list(nets)
    scores = [(ev.settled_score(a, b), ev.exact_score(a, b)) for a in names for b in names if a < b]
    assert {s for s, _ in scores} != {0.5}  # not all draws: the check can tell scores apart
    for settled, exact in scores:
        assert settled == pytest.approx(exact, abs=1e-9)


def test_settled_score_agrees_with_the_sampled_games_and_refuses_what_is_not_settled(tmp_path):
    """Connect Four: every one of a greedy pair's sampled games is one of its two games; a network
    with tied best moves, or one that samples, is not settled (None) and is sampled instead."""
    from actors.evaluator import EvaluatorImpl
    from league.config import load_config

    ev = EvaluatorImpl("evaluator:0", load_config(None, ["game.name=connect_four", f"run.storage={tmp_path}",
                                                         "policy.snapshot_play=greedy",
                                                         "evaluator.games_per_pair=16"]), None)
    assert ev.settled and not ev.exact
    for name, model in _greedy_networks("connect_four", (40, 41), hidden=(32,)).items():
        ev.cache.put(name, model)
    info = game_info("connect_four")
    flat = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(8,)))
    for prm in flat.parameters():
        prm.data.zero_()  # every legal move ties
    ev.cache.put("flat", GreedyPolicy(flat).eval())
    ev.cache.put("sampler", flat)
    for a, b in (("g40", "g41"), ("g41", "g40")):
        score = ev.settled_score(a, b)
        sampled = [r.score for r in ev.sampled_results(a, b)]
        assert score is not None and set(sampled) <= {0.0, 0.5, 1.0}
        assert score == pytest.approx(np.mean(sampled), abs=1e-12)  # half the games in each seat
    assert ev.settled_score("g40", "g41") + ev.settled_score("g41", "g40") == pytest.approx(1.0)
    assert ev.settled_score("g40", "flat") is None and ev.settled_score("sampler", "g40") is None
    undecided = []
    scores = ev.exact_scores([("g40", "g41"), ("g40", "flat")], ev.settled_score, undecided)
    assert [(a, b) for a, b, _ in scores] == [("g40", "g41")] and undecided == [("g40", "flat")]


def test_which_evaluator_measures_exploitability_is_configured(tmp_path):
    from actors.evaluator import EvaluatorImpl
    from league.config import load_config

    cfg = load_config(None, [f"run.storage={tmp_path}", "evaluator.count=2", "evaluator.exploitability=1"])
    assert [EvaluatorImpl(f"evaluator:{i}", cfg, None, index=i).measures_exploitability for i in range(2)] == [False,
                                                                                                              True]
    cfg = load_config(None, [f"run.storage={tmp_path}", "evaluator.exploitability=null"])
    assert not EvaluatorImpl("evaluator:0", cfg, None, index=0).measures_exploitability
    cfg = load_config(None, [f"run.storage={tmp_path}", "game.name=connect_four"])
    assert not EvaluatorImpl("evaluator:0", cfg, None, index=0).measures_exploitability  # no exact evaluation


def test_exact_nash_conv_of_a_matrix_mixture_is_the_best_response_gain():
    """Biased RPS (row payoffs [[0,-1,2],[1,0,-1],[-2,1,0]]) has the Nash (1/4, 1/2, 1/4):
    NashConv 0 there; uniform play gives each seat a best-response gain of 1/3."""
    from envs import make_game
    from evaluation.exploitability import exact_nash_conv

    game = make_game("biased_rps", 1)
    uniform = exact_nash_conv(game, [], [])
    assert uniform["nash_conv"] == pytest.approx(2 / 3, abs=1e-12)
    with pytest.raises(ValueError, match="exact"):
        exact_nash_conv(make_game("connect_four", 1), [], [])


def test_an_exact_evaluator_keeps_every_agents_profiles_and_only_a_few_networks(tmp_path):
    """Profiles for every agent scored (the exact payoff needs them pair after pair), networks
    for the last ``EXACT_MODELS_HELD`` used: its memory per agent is a profile's, not a network's."""
    from actors.evaluator import EXACT_MODELS_HELD, EvaluatorImpl
    from league.config import load_config

    info = game_info("kuhn_poker")
    ev = EvaluatorImpl("evaluator:0", load_config(None, [f"run.storage={tmp_path}"]), None)
    n = EXACT_MODELS_HELD + 16
    models = {}
    for i in range(n):
        torch.manual_seed(i)
        models[f"a{i}"] = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(8,)))
    ev.cache.fetch = lambda agent_id: policy_to_bytes(models[agent_id])
    now = [0.0]
    ev.cache.clock = lambda: now[0]
    scores = ev.exact_scores([(f"a{i}", f"a{i + 1}") for i in range(n - 1)])
    assert len(scores) == n - 1
    assert len(ev.profiles) == n and len(ev.cache) == EXACT_MODELS_HELD
    assert ev.cache.loads == n  # one load an agent: its profiles are kept
    again = ev.exact_scores([("a0", "a1")])  # a0's network left the cache; its profiles did not
    assert again == scores[:1] and ev.cache.loads == n
    # agents not scored for snapshots.cache_idle_seconds (the pool evicted them) leave both
    now[0] = ev.cfg.snapshots.cache_idle_seconds + 1
    assert ev.exact_scores([("a1", "a2")]) == scores[1:2]
    assert set(ev.profiles) == {"a1", "a2"} and set(ev.cache._entries) <= {"a1", "a2"}


def test_exploitability_rounds_keep_within_their_share_of_a_core():
    # a round of 1 s of CPU fits 10% of a core at one every 30 s; one of 6 s (a late pool's LP) waits
    # 60 s, so the rounds never take more than the share however large the pool grows
    from actors.evaluator import round_interval

    assert round_interval(30.0, 1.0, 0.1) == 30.0
    assert round_interval(30.0, 6.0, 0.1) == pytest.approx(60.0)
    for cpu in (0.5, 3.0, 7.5, 40.0):
        assert cpu / round_interval(30.0, cpu, 0.1) <= 0.1 + 1e-12


def test_sampled_games_keep_within_their_share_of_a_core():
    # a pair's games that took 2 s of CPU, paced to a quarter of a core, are followed by 6 s idle;
    # a share of 1 never waits
    from actors.evaluator import pace_seconds

    assert pace_seconds(2.0, 0.25) == pytest.approx(6.0)
    assert pace_seconds(2.0, 1.0) == 0.0
    for cpu in (0.01, 0.7, 3.0):
        for share in (0.1, 0.3, 0.5):
            assert cpu / (cpu + pace_seconds(cpu, share)) == pytest.approx(share)
