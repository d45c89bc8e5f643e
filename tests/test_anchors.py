"""Anchors: fixed opponents (evaluation.anchors) and the bench that scores stored mixtures against them."""

import json
import subprocess
import sys

import numpy as np
import pytest

from evaluation.anchors import AnchorSpec, parse_anchor, score_against

BATTLE = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"


def test_parse_anchor_reads_the_three_forms_and_names_a_bad_one():
    assert parse_anchor("uniform") == AnchorSpec("uniform", "uniform")
    assert parse_anchor("mcts:1000") == AnchorSpec("mcts:1000", "mcts", simulations=1000)
    assert parse_anchor("my_bots.c4:make").kind == "factory"
    for bad in ("", "mcts:", "mcts:0", "mcts:ten", "nonsense", "pkg.mod:not an identifier"):
        with pytest.raises(ValueError, match="anchor"):
            parse_anchor(bad)


def test_uniform_against_the_uniform_anchor_scores_one_half():
    """Identical players with seats alternated: the expected score is exactly 0.5."""
    out = score_against("tic_tac_toe", None, [None], [1.0], "uniform", games=600, seed=3)
    assert out["ci95"][0] <= 0.5 <= out["ci95"][1]
    assert abs(out["score"] - 0.5) < 0.07


def test_uniform_play_loses_to_mcts_on_connect_four():
    """Uniform random play scores about 0.1 against MCTS-10 on Connect Four (0.075 is the
    commonly quoted figure) and almost nothing against MCTS-100."""
    weak = score_against("connect_four", None, [None], [1.0], "mcts:10", games=300, seed=0)
    assert 0.03 <= weak["score"] <= 0.2
    strong = score_against("connect_four", None, [None], [1.0], "mcts:100", games=100, seed=0)
    assert strong["score"] < weak["score"] and strong["score"] <= 0.05


def test_a_user_bot_gets_the_native_state(tmp_path, monkeypatch):
    """A user's bot is built by its factory from the pyspiel.Game and is asked for every move
    of its seat with the native pyspiel.State."""
    (tmp_path / "first_bot.py").write_text(
        "import pyspiel\n"
        "calls = []\n"
        "class First:\n"
        "    def step(self, state):\n"
        "        calls.append(isinstance(state, pyspiel.State))\n"
        "        return state.legal_actions()[0]\n"
        "def make(game):\n"
        "    assert isinstance(game, pyspiel.Game)\n"
        "    return First()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import first_bot

    out = score_against("tic_tac_toe", None, [None], [1.0], "first_bot:make", games=40, seed=0)
    assert out["games"] == 40 and 0.0 <= out["score"] <= 1.0
    assert len(first_bot.calls) >= 40 * 2 and all(first_bot.calls)  # every game has >= 2 bot moves
    with pytest.raises(ValueError, match="cannot load"):
        score_against("tic_tac_toe", None, [None], [1.0], "first_bot:nope", games=1)


def test_mcts_needs_a_perfect_information_game():
    with pytest.raises(ValueError, match="perfect-information"):
        score_against("kuhn_poker", None, [None], [1.0], "mcts:10", games=1)


def test_mixture_weights_are_checked():
    with pytest.raises(ValueError, match="weights"):
        score_against("tic_tac_toe", None, [None], [np.nan], "uniform", games=1)


def test_bench_anchors_prints_one_json_line_per_target():
    out = subprocess.run([sys.executable, "-m", "evaluation.anchor_scores", "--uniform", "--game", "tic_tac_toe",
                          "--anchors", "uniform,mcts:10", "--games", "20"],
                         capture_output=True, text=True, check=True, timeout=120)
    line = json.loads(out.stdout.strip())
    assert line["bench"] == "anchors" and set(line["anchors"]) == {"uniform", "mcts:10"}
    assert all(v["games"] == 20 and 0.0 <= v["score"] <= 1.0 for v in line["anchors"].values())
    bad = subprocess.run([sys.executable, "-m", "evaluation.anchor_scores", "--uniform", "--game", "tic_tac_toe",
                          "--anchors", "mcts:0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--anchors" in bad.stderr


def test_bench_anchors_scores_a_team_game_from_its_params_and_teams():
    out = subprocess.run([sys.executable, "-m", "evaluation.anchor_scores", "--uniform", "--game", BATTLE,
                          "--params", '{"map_size": 12}', "--teams", '{"prefix": ["red_", "blue_"], "score": '
                          '"survivors", "max_cycles": 100}', "--anchors", "evaluation.scripted:attack_nearest",
                          "--games", "6"], capture_output=True, text=True, check=True, timeout=120)
    line = json.loads(out.stdout.strip())
    scripted = line["anchors"]["evaluation.scripted:attack_nearest"]
    # the scripted team wins every game on the smallest map (docs/teams.md): uniform play scores 0
    assert scripted["games"] == 6 and scripted["score"] == 0.0, line


# -- anchors in the league: config, the anchored Elo, the progress line --------------------------

def test_anchored_elo_against_one_anchor_is_the_closed_form():
    from league.anchors import anchored_elo

    for rating, score, games in ((1500.0, 0.75, 40), (0.0, 0.2, 10), (1000.0, 0.5, 7)):
        assert anchored_elo([(rating, score, games)]) == pytest.approx(
            rating + 400 * np.log10(score / (1 - score)), abs=1e-9)
    # a clean sweep is half a game from it: s clamped to 1 - 1/(2n)
    assert anchored_elo([(1500.0, 1.0, 50)]) == pytest.approx(1500 + 400 * np.log10(0.99 / 0.01), abs=1e-9)
    assert anchored_elo([(1500.0, 0.0, 50)]) == pytest.approx(1500 - 400 * np.log10(0.99 / 0.01), abs=1e-9)


def test_anchored_elo_over_several_anchors_is_the_maximum_likelihood_rating():
    """The rating whose Elo expectations reproduce the scores is the maximum-likelihood one, and
    at the result the likelihood's gradient, sum n_i (s_i - E_i), is zero."""
    from league.anchors import anchored_elo

    true = 1320.0
    anchors = [(1000.0, 30), (1500.0, 50), (2000.0, 100)]  # no score within half a game of a sweep
    exact = [(r, 1 / (1 + 10 ** ((r - true) / 400)), n) for r, n in anchors]
    assert anchored_elo(exact) == pytest.approx(true, abs=1e-6)
    rows = [(1000.0, 0.9, 30), (1500.0, 0.55, 50), (2000.0, 0.1, 20)]
    r = anchored_elo(rows)
    assert sum(n * (s - 1 / (1 + 10 ** ((a - r) / 400))) for a, s, n in rows) == pytest.approx(0.0, abs=1e-6)
    # two anchors of one rating pool their games: the closed form at the pooled score
    pooled = anchored_elo([(1200.0, 0.6, 30), (1200.0, 0.8, 10)])
    s = (0.6 * 30 + 0.8 * 10) / 40
    assert pooled == pytest.approx(1200 + 400 * np.log10(s / (1 - s)), abs=1e-6)
    with pytest.raises(ValueError):
        anchored_elo([])


def test_anchor_ratings_pin_uniform_at_the_league_elo_anchor_unless_given():
    from league.anchors import anchor_ratings
    from league.elo import EloTable, UNIFORM_RANDOM

    assert anchor_ratings(["uniform", "mcts:10"], {}) == {"uniform": EloTable().anchors[UNIFORM_RANDOM]}
    assert anchor_ratings(["uniform", "mcts:10"], {"mcts:10": 1400, "uniform": 0}) == {"uniform": 0.0,
                                                                                        "mcts:10": 1400.0}
    assert anchor_ratings(["mcts:10"], {}) == {}


def test_anchor_config_parses_and_bad_anchors_name_their_key():
    from league.config import ConfigError, load_config

    cfg = load_config("configs/smoke.yaml", ['anchors=[uniform, "mcts:100"]', 'anchor_elo={"mcts:100": 1500}',
                                             "evaluator.anchor_every_seconds=30", "evaluator.anchor_games=10"])
    assert cfg.anchors == ["uniform", "mcts:100"] and cfg.anchor_elo == {"mcts:100": 1500}
    assert (cfg.evaluator.anchor_every_seconds, cfg.evaluator.anchor_games) == (30, 10)
    assert load_config().anchors == [] and load_config().anchor_elo == {}
    for overrides, key in (
            (["anchors=[uniform, nonsense]"], "anchors[1]"),
            (["anchors=[mcts:0]"], "anchors[0]"),
            (["anchors=[uniform, uniform]"], "anchors[1]"),
            (["anchors=uniform"], "anchors"),
            (["anchors=[uniform]", 'anchor_elo={"mcts:10": 1500}'], "anchor_elo.mcts:10"),
            (["anchors=[uniform]", 'anchor_elo={"uniform": high}'], "anchor_elo.uniform"),
            (["evaluator.anchor_every_seconds=0"], "evaluator.anchor_every_seconds"),
            (["evaluator.anchor_games=0"], "evaluator.anchor_games"),
            (["evaluator.anchor_num_cpus=-1"], "evaluator.anchor_num_cpus")):
        with pytest.raises(ConfigError) as err:
            load_config("configs/smoke.yaml", overrides)
        assert err.value.key == key, (overrides, str(err.value))


@pytest.mark.parametrize("overrides, key, words", [
    (["anchors=[mcts:10]"], "anchors[0]", "perfect-information"),  # smoke plays Kuhn poker
    (["game.name=tic_tac_toe", "anchors=[uniform, no_such_pkg.bots:make]"], "anchors[1]", "cannot load"),
    (["game.name=tic_tac_toe", "anchors=[json:no_such_factory]"], "anchors[0]", "cannot load"),
    (["game.name=biased_rps", "anchors=[uniform, mcts:10]"], "anchors[1]", "OpenSpiel"),
    # a team game has uniform and factory anchors (played through its VectorGame), not MCTS
    ([f"game.name={BATTLE}", "game.teams={prefix: [red_, blue_], score: survivors}", "game.params={map_size: 12}",
      "anchors=[uniform, evaluation.scripted:attack_nearest, mcts:10]"], "anchors[2]", "OpenSpiel"),
    (["game.name=rps", "anchors=[evaluation.scripted:attack_nearest]"], "anchors[0]", "plays MAgent2's battle"),
])
def test_the_launcher_stops_before_ray_on_an_anchor_the_game_cannot_play(overrides, key, words):
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", *overrides],
                         capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nash-league: config: {key}"), out.stderr
    assert words in lines[0], lines[0]


def test_a_team_configs_anchors_pass_the_launchers_check():
    """The check the launcher runs before Ray: uniform and the scripted battle team on a team game."""
    from actors.preflight import check_runnable
    from league.config import load_config

    cfg = load_config("configs/smoke.yaml", [f"game.name={BATTLE}", "game.teams={prefix: [red_, blue_]}",
                                             "game.params={map_size: 12}",
                                             "anchors=[uniform, evaluation.scripted:attack_nearest]"])
    assert check_runnable(cfg).team_size == 2


def test_the_progress_line_shows_the_published_mixtures_anchor_scores_and_anchored_elo():
    from actors.progress import quality_text

    status = {"meta_exploitability": 0.0, "quality": {"anchors": {
        "published": {"uniform": {"value": 0.9}, "mcts:10": {"value": 0.25}},
        "newest_main": {"uniform": {"value": 0.8}}, "elo": {"published": {"value": 1381.7}}}}}
    assert quality_text(status) == "meta-expl 0.000 vs anchors uniform 0.90 mcts:10 0.25 (anchored Elo 1382)"


def test_bench_anchors_plays_a_configs_round_and_prints_its_cpu_share():
    out = subprocess.run([sys.executable, "-m", "evaluation.anchor_scores", "--config", "configs/smoke.yaml", "--uniform"],
                         capture_output=True, text=True, check=True, timeout=120)
    line = json.loads(out.stdout.strip())
    assert line["game"] == "kuhn_poker" and set(line["anchors"]) == {"uniform"}
    assert line["anchors"]["uniform"]["games"] == 200  # evaluator.anchor_games of the smoke config
    # uniform against uniform, seats alternating: 0.5 in expectation
    assert line["anchors"]["uniform"]["ci95"][0] <= 0.5 <= line["anchors"]["uniform"]["ci95"][1]
    r, every = line["round_cpu_seconds"], line["anchor_every_seconds"]
    assert every == 10 and line["cpu_share"] == pytest.approx(r / (r + every), abs=1e-3)


def test_every_strategy_scores_one_half_against_uniform_in_rock_paper_scissors():
    """Uniform is RPS's Nash: any strategy's expected score against it is exactly 1/2. The
    uniform anchor plays through the game protocol, so a matrix game has it too."""
    import torch

    from envs import make_game
    from evaluation.anchors import check_anchor
    from policies.net import ActorCritic, PolicySpec

    game = make_game("rps", 1)
    torch.manual_seed(0)
    rock = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (8,)))
    with torch.no_grad():
        rock.policy_head.bias.copy_(torch.tensor([20.0, 0.0, 0.0]))  # plays rock
    out = score_against("rps", None, [rock], [1.0], "uniform", games=4000, seed=1)
    assert out["ci95"][0] <= 0.5 <= out["ci95"][1] and abs(out["score"] - 0.5) < 0.03
    check_anchor("uniform", "rps")
    with pytest.raises(ValueError, match="OpenSpiel"):
        check_anchor("mcts:10", "rps")


def test_the_judge_spaces_its_rounds_to_stay_within_its_share_of_a_core():
    from actors.anchor_judge import next_round_at

    # a short round: the pause after it decides
    assert next_round_at(start=0.0, end=10.0, cpu_seconds=10.0, every=120.0, share=0.2) == 130.0
    # a long round (games against MCTS grow as the league resists it): 40 CPU-s at 0.2 of a core
    # is 200 s from its start, later than 120 s after its end
    assert next_round_at(start=0.0, end=40.0, cpu_seconds=40.0, every=120.0, share=0.2) == pytest.approx(200.0)
    # the share it keeps, over many such rounds, is at most the bound
    t, used = 0.0, 0.0
    for _ in range(50):
        used += 40.0
        t = next_round_at(t, t + 40.0, 40.0, 120.0, 0.2)
    assert used / t <= 0.2 + 1e-9
    assert next_round_at(start=0.0, end=40.0, cpu_seconds=40.0, every=120.0, share=0.0) == 160.0  # no bound
