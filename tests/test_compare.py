"""evaluation/compare.py without Ray: the two sides' configs, the run order, the
statistics it reports, and the head-to-head score against the exact value on Kuhn.

The bench's runs themselves (real launcher, minutes each) are not tested here: the
suite's budget has no room for them; `python -m evaluation.compare` prints them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from evaluation import compare as bench
from envs import make_game
from league.config import load_config
from league.pool import AgentRecord, AgentType
from league.store import LeagueStore
from evaluation.exploitability import exact_nash_conv, expected_returns_matrix
from policies.net import ActorCritic, PolicySpec
from policies.snapshot import policy_to_bytes

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------- the two sides
@pytest.mark.parametrize("game", bench.ALL_GAMES)
def test_selfplay_side_is_the_shipped_config_with_only_the_roles_and_the_publisher_changed(game, tmp_path):
    extra = ["rollout.lanes=1", "roles.league_exploiter.count=1"]  # a league side even where the config has none
    cfgs = {side: load_config(bench.config_path(game), bench.run_overrides(
        side, minutes=0.5, storage=tmp_path / side, seed=2, extra=extra)) for side in bench.SIDES}
    league, selfplay = (dataclasses.asdict(cfgs[s]) for s in bench.SIDES)
    league_roles, selfplay_roles = league.pop("roles"), selfplay.pop("roles")
    for d in (league, selfplay):
        d["run"].pop("storage")
    assert selfplay["evaluator"].pop("publish") == "nash"  # self-play publishes the meta-game Nash
    league["evaluator"].pop("publish")
    assert league == selfplay  # ppo, policy, rollout, the rest of the evaluator, run budget and seed: identical
    assert league["run"]["max_minutes"] == 0.5 and league["run"]["seed"] == 2
    assert league["rollout"]["lanes"] == 1  # --set reaches both sides
    # the main agent keeps everything (its snapshot cadence too) but plays itself
    main = dict(league_roles["main_agent"], sampling="self")
    assert selfplay_roles["main_agent"] == main
    assert selfplay_roles["main_exploiter"]["count"] == 0 and selfplay_roles["league_exploiter"]["count"] == 0
    assert any(league_roles[role]["count"] != 0 for role in ("main_exploiter", "league_exploiter"))


def test_a_config_that_already_is_self_play_is_refused_until_the_league_side_differs():
    # configs/leduc_poker.yaml ships the main agent alone, in self-play, publishing the least
    # exploitable mixture of its snapshots; the self-play side publishes the meta-game Nash
    assert bench.check_configs("leduc_poker", [])[0] == "leduc_poker"
    with pytest.raises(ValueError, match="already is self-play"):
        bench.check_configs("leduc_poker", ["evaluator.publish=nash"])
    assert bench.check_configs("leduc_poker", ["evaluator.publish=nash", "roles.league_exploiter.count=1"])


def test_runs_alternate_sides_seed_by_seed_and_which_goes_first_by_the_seeds_parity():
    assert bench.run_order([1, 2, 3]) == [(1, "league"), (1, "selfplay"), (2, "selfplay"), (2, "league"),
                                          (3, "league"), (3, "selfplay")]
    assert bench.run_order([4]) == [(4, "selfplay"), (4, "league")]  # --first-seed 4: as in a longer series


def test_bad_sides_and_options_are_refused_with_the_option_named(capsys):
    with pytest.raises(ValueError, match="side"):
        bench.run_overrides("exploiters", minutes=1, storage="x", seed=0)
    for argv, named in ((["--seeds", "0"], "--seeds"), (["--minutes", "0"], "--minutes"),
                        (["--minutes", "nan"], "--minutes"), (["--probe-steps", "0"], "--probe-steps"),
                        (["--set", "run.seed=3"], "run.seed"), (["--set", "ppo.lr"], "key=value"),
                        (["--game", "go_19x19"], "shipped: "), (["--anchors", "mcts:0"], "--anchors"),
                        (["--anchor-games", "0"], "--anchor-games"), (["--search", "-1"], "--search"),
                        (["--rollout-weight", "1.5"], "--rollout-weight")):
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(argv)
        assert exc.value.code == 2
        assert named in capsys.readouterr().err


def test_games_all_expands_to_the_three_games_once_each():
    assert bench.parse_games(None) == ["kuhn_poker"]
    assert bench.parse_games(["connect_four", "all", "kuhn_poker"]) == ["connect_four", "kuhn_poker", "leduc_poker"]


def test_minutes_reach_the_launcher_as_a_number():
    for minutes in (0.5, 10, 1e-5):
        (text,) = [o for o in bench.run_overrides("league", minutes=minutes, storage="s", seed=0)
                   if o.startswith("run.max_minutes=")]
        assert load_config(None, [text]).run.max_minutes == pytest.approx(minutes)


# ------------------------------------------------------ two configs (--versus)
SEARCH, PPO = ROOT / "configs" / "connect_four.yaml", ROOT / "configs" / "connect_four_ppo.yaml"


def test_versus_sides_are_named_by_their_configs_and_run_them_as_they_are(tmp_path):
    first, second = bench.comparison(SEARCH, PPO)
    assert (first.label, second.label) == ("connect_four", "connect_four_ppo")
    assert (first.config, second.config) == (SEARCH, PPO)
    assert (first.kept_option, second.kept_option) == ("--first-from", "--second-from")
    assert not bench.self_play_sides((first, second))
    assert bench.self_play_sides(bench.comparison(PPO))  # without --versus: league against self-play, as ever
    extra = ["rollout.lanes=1"]
    for side in (first, second):
        overrides = bench.run_overrides(side, minutes=0.5, storage=tmp_path / side.label, seed=2, extra=extra)
        own = [o for o in overrides if o.split("=", 1)[0] not in (*bench.BENCH_KEYS, "run.progress_every_seconds")]
        assert own == extra  # the shared --set alone: no SELFPLAY_OVERRIDES on either side
        cfg = load_config(side.config, overrides)
        assert cfg.rollout.lanes == 1 and cfg.run.seed == 2 and cfg.run.max_minutes == 0.5
        shipped = load_config(side.config)
        assert cfg.roles == shipped.roles and cfg.evaluator == shipped.evaluator  # roles and publisher as shipped
    assert load_config(first.config).roles.main_agent.learner == "search"
    assert bench.searched_roles(first, []) == ("main_agent",) and bench.searched_roles(second, []) == ()
    # --config alone: league against self-play from that config, the self-play side keeping its learner
    league, selfplay = bench.comparison(SEARCH)
    assert (league.label, selfplay.label, selfplay.overrides) == ("league", "selfplay", tuple(bench.SELFPLAY_OVERRIDES))
    assert bench.played_config("connect_four", selfplay, [])["roles"]["main_agent"]["learner"] == "search"
    assert "learner" not in bench.played_config("kuhn_poker", "selfplay", [])["roles"]["main_agent"]  # PPO's, as recorded


def test_versus_labels_must_differ_and_not_be_keys_of_the_json_line(tmp_path):
    with pytest.raises(ValueError, match="both sides' configs are named 'connect_four_ppo'"):
        bench.comparison(PPO, tmp_path / "connect_four_ppo.yaml")
    with pytest.raises(ValueError, match="'anchors' is a key of the JSON line"):
        bench.comparison(SEARCH, tmp_path / "anchors.yaml")


def test_two_configs_of_different_games_are_refused_in_one_line_before_any_run(tmp_path, capsys):
    kuhn = ROOT / "configs" / "kuhn_poker.yaml"
    with pytest.raises(bench.UsageError, match="plays kuhn_poker, --config configs/connect_four.yaml plays "
                                               "connect_four; both sides must play one game"):
        bench.check_configs("connect_four", [], bench.comparison(SEARCH, kuhn))
    other = tmp_path / "kuhn_players.yaml"  # the same game's name, other params
    other.write_text("game: {name: kuhn_poker, params: {players: 2}}\n")
    with pytest.raises(bench.UsageError, match='plays kuhn_poker {"players": 2}, --config configs/kuhn_poker.yaml '
                                               "plays kuhn_poker;"):
        bench.check_configs("kuhn_poker", [], bench.comparison(kuhn, other))
    assert bench.check_configs("kuhn_poker", [], bench.comparison(kuhn, ROOT / "configs" / "kuhn_selfplay.yaml")) == (
        "kuhn_poker", {}, True)
    assert bench.main(["--game", "connect_four", "--config", str(SEARCH), "--versus", str(kuhn),
                       "--storage", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nash-league: --versus ") and "plays kuhn_poker" in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing ran


def test_versus_options_are_checked_before_anything_runs(capsys, tmp_path):
    args = bench.parse_args(["--game", "connect_four", "--config", str(SEARCH), "--versus", str(PPO)])
    assert args.games == ["connect_four"]  # --game names the folder
    assert bench.parse_args(["--config", str(SEARCH)]).games == ["connect_four"]  # by default the config's name
    for argv, named in ((["--config", str(SEARCH), "--game", "a", "--game", "b"], "at most one --game"),
                        (["--config", str(SEARCH), "--game", "all"], "at most one --game"),
                        (["--versus", str(PPO), "--game", "connect_four", "--game", "kuhn_poker"], "give one --game"),
                        (["--versus", str(tmp_path / "none.yaml")], "--versus"),
                        (["--config", str(tmp_path / "none.yaml")], "--config"),
                        (["--versus", str(PPO), "--game", "connect_four", "--league-from", str(tmp_path)],
                         "--league-from: only without --versus"),
                        (["--first-from", str(tmp_path)], "--first-from: only with --versus"),
                        (["--config", str(SEARCH), "--versus", str(PPO), "--second-from", str(tmp_path / "no")],
                         "--second-from")):
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(argv)
        assert exc.value.code == 2
        assert named in capsys.readouterr().err, argv


def test_two_configs_alternate_which_goes_first_by_the_seeds_parity():
    first, second = bench.comparison(SEARCH, PPO)
    assert bench.run_order([1, 2, 3], (first, second)) == [(1, first), (1, second), (2, second), (2, first),
                                                           (3, first), (3, second)]
    assert bench.run_order([4], ("a", "b")) == [(4, "b"), (4, "a")]


# ------------------------------------------------------------- the launcher's run
# A child that stops the way the launcher does: on SIGTERM it writes what it flushed, exits 0.
FLUSHING_CHILD = """
import signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "w").write("flushed")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
"""


@contextlib.contextmanager
def ctrl_c_after(seconds: float):
    """KeyboardInterrupt in this thread after ``seconds``, as Ctrl-C would raise it."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupted_bench_stops_its_run_with_sigterm_and_waits_for_it(tmp_path):
    marker = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-c", FLUSHING_CHILD, str(marker)])
    ready = Path(f"{marker}.ready")
    while not ready.exists() and proc.poll() is None:
        time.sleep(0.02)

    with pytest.raises(KeyboardInterrupt), ctrl_c_after(0.2):
        bench.wait_or_stop(proc, grace_s=30)
    assert proc.returncode == 0  # it exited its own way, not killed
    assert marker.read_text() == "flushed"


def test_a_run_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"

    with pytest.raises(KeyboardInterrupt), ctrl_c_after(0.1):
        bench.wait_or_stop(proc, grace_s=0.5)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def test_a_run_left_alone_gives_its_exit_status():
    assert bench.wait_or_stop(subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])) == 3


# ------------------------------------------------------------- statistics
def test_summary_gives_median_and_range_in_seed_order():
    assert bench.summary([0.3, 0.1, 0.2]) == {"median": 0.2, "range": [0.1, 0.3], "values": [0.3, 0.1, 0.2]}
    assert bench.summary([4, 1, 2, 3])["median"] == 2.5
    with pytest.raises(ValueError):
        bench.summary([])


def test_episodes_follow_the_weights_with_a_floor_per_member():
    assert bench.allocate_episodes([0.5, 0.3, 0.2], 1000, 1) == [500, 300, 200]
    assert bench.allocate_episodes([1, 1, 1], 10, 1) == [4, 3, 3]  # largest remainders: sums to the total
    assert bench.allocate_episodes([0.98, 0.01, 0.01], 1000, 256) == [980, 256, 256]
    with pytest.raises(ValueError):
        bench.allocate_episodes([0, 0], 10, 1)


def test_stratified_mean_weights_strata_by_mixture_weight_not_by_sample_count():
    # stratum 1: mean 0.5, variance 0.5, n=2; stratum 2: constant 1.0, n=3
    mean, (low, high) = bench.stratified_mean_ci([[0.0, 1.0], [1.0, 1.0, 1.0]], [0.5, 0.5])
    assert mean == pytest.approx(0.75)
    assert (high - low) / 2 == pytest.approx(1.959964 * math.sqrt(0.25 * 0.5 / 2))
    # one stratum: the plain mean and its normal interval
    x = np.random.default_rng(0).normal(size=500)
    mean, (low, high) = bench.stratified_mean_ci([x.tolist()], [3.0])
    assert mean == pytest.approx(x.mean())
    assert (high - low) / 2 == pytest.approx(1.959964 * x.std(ddof=1) / math.sqrt(500))


def test_stratified_interval_covers_the_mixture_mean_at_the_normal_rate():
    rng = np.random.default_rng(1)
    means, weights = np.array([0.2, 0.6, 0.9]), np.array([0.6, 0.3, 0.1])
    truth = float(means @ weights)
    hits = 0
    for _ in range(1000):
        strata = [rng.binomial(1, m, size=n).astype(float).tolist() for m, n in zip(means, (300, 150, 60))]
        low, high = bench.stratified_mean_ci(strata, weights)[1]
        hits += low <= truth <= high
    assert abs(hits / 1000 - 0.95) < 0.025


def test_mean_of_estimates_adds_half_widths_in_quadrature():
    mean, (low, high) = bench.mean_of_estimates([(0.4, [0.3, 0.5]), (0.6, [0.5, 0.7])])
    assert mean == pytest.approx(0.5)
    assert (high - low) / 2 == pytest.approx(math.sqrt(0.01 + 0.01) / 2)


# ---------------------------------------------------------- head to head
def sharp_models(game, k, seed):
    """Networks far from uniform (large logits), so mixtures of them differ clearly."""
    torch.manual_seed(seed)
    models = []
    for _ in range(k):
        m = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,)))
        with torch.no_grad():
            m.policy_head.weight.mul_(50.0)
        models.append(m)
    return models


def leaning_model(game, action, logit):
    """A network that prefers ``action`` everywhere by ``logit`` (Kuhn: 0 pass/fold, 1 bet/call)."""
    m = ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,)))
    with torch.no_grad():
        m.policy_head.weight.zero_()
        m.policy_head.bias.zero_()
        m.policy_head.bias[action] = logit
    return m


def nash_store(run_dir, game_name, models, weights, play: str = "sample"):
    """A store as a league run leaves it: snapshots (playing as ``play`` says) and a published Nash
    over them."""
    with LeagueStore(run_dir) as store:
        store.set_meta("game", game_name)
        ids = []
        for i, m in enumerate(models):
            agent_id = f"main_agent-0-v{i}"
            store.add_agent(AgentRecord(agent_id=agent_id, version=i, agent_type=AgentType.MAIN_AGENT,
                                        learner_id="main_agent-0", step=i), policy_to_bytes(m, play))
            ids.append(agent_id)
        store.save_nash(0.0, len(ids), ids, np.asarray(weights, dtype=float), 0.0, 0.0, 0.0, "lp")


def test_head_to_head_matches_the_exact_mixture_score_on_kuhn(tmp_path):
    game = make_game("kuhn_poker", 1)
    # a passive self-play mixture (folds to every bet), so the league's expected score is well above 1/2
    league, selfplay = sharp_models(game, 3, seed=0), [leaning_model(game, 0, 10.0), leaning_model(game, 1, 1.0)]
    lw, sw = np.array([0.6, 0.3, 0.1]), np.array([0.7, 0.3])
    nash_store(tmp_path / "league", "kuhn_poker", league, lw)
    nash_store(tmp_path / "selfplay", "kuhn_poker", selfplay, sw)
    out = bench.head_to_head("kuhn_poker", {}, tmp_path / "league", tmp_path / "selfplay", 60_000, seed=0)
    # exact: league member i in seat 0 against self-play member j in seat 1, and the swap
    lo, hi = -2.0, 2.0
    as0 = (expected_returns_matrix("kuhn_poker", league, selfplay) - lo) / (hi - lo)
    as1 = (-expected_returns_matrix("kuhn_poker", selfplay, league).T - lo) / (hi - lo)
    exact = float(lw @ (0.5 * (as0 + as1)) @ sw)
    low, high = out["ci95"]
    assert out["episodes"] >= 60_000
    assert abs(out["score"] - exact) < 1.5 * (high - low) / 2, (out, exact)  # about 3.4 sigma
    assert abs(exact - 0.5) > 3 * (high - low) / 2  # the mixtures differ: the check is not 0.5 vs 0.5


def test_a_mixture_against_itself_scores_one_half(tmp_path):
    game = make_game("connect_four", 1)
    models, w = sharp_models(game, 2, seed=2), [0.5, 0.5]
    nash_store(tmp_path / "a", "connect_four", models, w)
    out = bench.head_to_head("connect_four", {}, tmp_path / "a", tmp_path / "a", 4_000, seed=1, num_envs=128)
    low, high = out["ci95"]
    assert low < 0.5 < high and high - low < 0.1


def test_a_run_that_published_no_nash_is_reported_with_what_to_change(tmp_path):
    with LeagueStore(tmp_path / "empty") as store:
        store.set_meta("game", "connect_four")
    with pytest.raises(RuntimeError, match="--minutes"):
        bench.measure("connect_four", {}, False, tmp_path / "empty", 1000, 100, seed=0)


def test_anchors_default_to_mcts_ladder_on_perfect_information_games_only():
    assert bench.default_anchors("connect_four", {}) == ["mcts:100", "mcts:1000"]
    assert bench.default_anchors("kuhn_poker", {}) == []
    assert bench.default_anchors("rps", {}) == []
    assert bench.parse_args(["--anchors", "uniform, mcts:10"]).anchors == ["uniform", "mcts:10"]
    assert bench.parse_args(["--anchors", ""]).anchors == []


def test_anchor_scores_of_a_stored_mixture_are_its_scores_against_the_bots(tmp_path):
    """A stored mixture of near-uniform nets plays like uniform play: about 0.5 against the
    uniform anchor (identical players, seats alternating) and far less against MCTS-100."""
    game = make_game("tic_tac_toe", 1)
    near_uniform = [ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,))) for _ in range(2)]
    nash_store(tmp_path / "run", "tic_tac_toe", near_uniform, [0.5, 0.5])
    out, searched = bench.anchor_scores("tic_tac_toe", {}, tmp_path / "run", ["uniform", "mcts:100"], 400, seed=0)
    assert searched == {}  # no search asked for
    assert abs(out["uniform"] - 0.5) < 0.08
    assert out["mcts:100"] < 0.3


def test_stored_rates_are_the_env_step_counter_and_the_learners_steps_over_the_run_seconds(tmp_path):
    with LeagueStore(tmp_path / "run") as store:
        store.set_meta("game", "kuhn_poker")
        with store.transaction() as db:
            db.execute("INSERT INTO counters VALUES ('env_steps', 12000.0)")
        store.save_learner("main_agent-0", "main_agent", 3, 9000, None)
        store.save_learner("main_exploiter-0", "main_exploiter", 1, 3000, None)
    assert bench.stored_rates(tmp_path / "run", 60.0) == pytest.approx(
        {"env_steps_per_s": 200.0, "trained_agent_steps_per_s": 200.0})


def test_learner_rates_are_the_learners_versions_and_the_search_learners_steps_over_the_run_seconds(tmp_path):
    with LeagueStore(tmp_path / "run") as store:
        store.set_meta("game", "connect_four")
        store.save_learner("main_agent-0", "main_agent", 30, 9000, None)  # a search learner: 9,000 searched roots
        store.save_learner("main_exploiter-0", "main_exploiter", 6, 3000, None)  # PPO: its steps are not searched
    assert bench.learner_rates(tmp_path / "run", 60.0) == pytest.approx({"learner_updates_per_s": 0.6})
    assert bench.learner_rates(tmp_path / "run", 60.0, ("main_agent",)) == pytest.approx(
        {"learner_updates_per_s": 0.6, "positions_searched_per_s": 150.0})


def test_two_kept_configs_are_measured_under_their_labels_with_their_learners_pace(tmp_path):
    """``--versus`` with ``--first-from`` and ``--second-from``: nothing runs; each label's record
    comes from its own kept store, the JSON line says which config each ran, and no side is
    called league or self-play."""
    game = make_game("kuhn_poker", 1)
    kuhn, selfplay_cfg = ROOT / "configs" / "kuhn_poker.yaml", ROOT / "configs" / "kuhn_selfplay.yaml"
    sides = bench.comparison(kuhn, selfplay_cfg)
    kept = tmp_path / "kept" / "kuhn_poker"
    mixtures = {"kuhn_poker": ([leaning_model(game, 1, 2.0), leaning_model(game, 0, 2.0)], [0.5, 0.5], 40),
                "kuhn_selfplay": ([leaning_model(game, 0, 10.0)], [1.0], 12)}
    for side in sides:
        models, weights, version = mixtures[side.label]
        nash_store(kept / f"{side.label}-seed1", "kuhn_poker", models, weights)
        with LeagueStore(kept / f"{side.label}-seed1", create=False) as store:
            store.save_learner("main_agent-0", "main_agent", version, 6000, None)
        bench.write_run_record(kept / f"{side.label}-seed1", 60.0 if side.label == "kuhn_poker" else 30.0, 1.0,
                               bench.played_config("kuhn_poker", side, []))
    args = bench.parse_args(["--game", "kuhn_poker", "--config", str(kuhn), "--versus", str(selfplay_cfg),
                             "--minutes", "1", "--seeds", "1", "--first-from", str(tmp_path / "kept"),
                             "--second-from", str(tmp_path / "kept")])
    stores = {side.label: bench.kept_stores("kuhn_poker", args, side) for side in sides}
    out = bench.bench_game("kuhn_poker", args, tmp_path / "runs", None, stores, sides)
    assert not (tmp_path / "runs").exists()  # nothing ran
    assert out["bench"] == "config_vs_config"
    assert out["sides"] == {"first": {"label": "kuhn_poker", "config": "configs/kuhn_poker.yaml"},
                            "second": {"label": "kuhn_selfplay", "config": "configs/kuhn_selfplay.yaml"}}
    assert out["first_from"] == out["second_from"] == str(kept)
    assert not {"league", "selfplay", "config", "selfplay_overrides", "league_from", "selfplay_from"} & set(out)
    assert set(out) <= set(bench.REPORT_KEYS) | {"kuhn_poker", "kuhn_selfplay"}
    for label, (models, weights, _) in mixtures.items():
        assert out[label]["values"] == [pytest.approx(exact_nash_conv(game, models, weights)["nash_conv"], abs=1e-9)]
        assert "positions_searched_per_s" not in out[label]  # PPO learners both
    assert out["kuhn_poker"]["learner_updates_per_s"]["values"] == [pytest.approx(40 / 60.0, abs=1e-3)]
    assert out["kuhn_selfplay"]["learner_updates_per_s"]["values"] == [pytest.approx(12 / 30.0, abs=1e-3)]
    assert out["kuhn_selfplay"]["trained_agent_steps_per_s"]["values"] == [200.0]  # 6,000 over its record's 30 s


def test_a_kept_self_play_run_serves_a_bench_whose_self_play_would_play_the_same(tmp_path):
    """``--selfplay-from``: the record a bench with ``--storage`` writes beside a store is read
    back. A ``--set`` of the main agent's mix reaches only the league side (self-play never reads
    it): the same self-play run. Other minutes, or a ``--set`` self-play reads, are refused, naming
    what differs."""
    store = tmp_path / "connect_four" / "selfplay-seed2"
    with LeagueStore(store) as kept:
        kept.set_meta("game", "connect_four")
    shipped = bench.played_config("connect_four", "selfplay", [])
    bench.write_run_record(store, 912.5, 15.0, shipped)
    assert bench.kept_run(store, 15, shipped) == 912.5
    mix = ["roles.main_agent.self_play=0.85", "roles.main_agent.pfsp=0.1", "roles.main_agent.forgotten=0.05"]
    assert bench.played_config("connect_four", "selfplay", mix) == shipped
    assert bench.played_config("connect_four", "league", mix) != bench.played_config("connect_four", "league", [])
    assert bench.kept_run(store, 15, bench.played_config("connect_four", "selfplay", mix)) == 912.5
    with pytest.raises(ValueError, match="ran 15 min, this bench 10"):
        bench.kept_run(store, 10, shipped)
    with pytest.raises(ValueError, match=re.escape(f"ran with ppo.lr = {shipped['ppo']['lr']}, this bench's 0.001")):
        bench.kept_run(store, 15, bench.played_config("connect_four", "selfplay", ["ppo.lr=0.001"]))
    for corrupt in ("{not json", '{"minutes": 15}', "[]"):
        store.with_name(store.name + ".run.json").write_text(corrupt)
        with pytest.raises(ValueError, match="is not a run record"):
            bench.kept_run(store, 15, shipped)


def test_a_kept_store_without_its_record_gives_the_span_of_its_writes(tmp_path):
    """A store kept before records were written: from the coordinator's first start to its last
    event, measurement or rating. A folder without a store, or a store with no run, is refused."""
    with LeagueStore(tmp_path / "run") as store:
        store.set_meta("game", "connect_four")
        with store.transaction() as db:
            db.execute("INSERT INTO events (time, kind, data) VALUES (1000.0, 'coordinator_start', '{}')")
            db.execute("INSERT INTO events (time, kind, data) VALUES (1500.0, 'evict', '{}')")
            db.execute("INSERT INTO measurements (time, kind, value, data) VALUES (1890.0, 'probe_br_return', 0.5, '{}')")
            db.execute("INSERT INTO elo_history VALUES (1900.5, 'main_agent-0-v1', 'main_agent', 1200.0)")
    assert bench.kept_run(tmp_path / "run", 15, {}) == pytest.approx(900.5)
    with LeagueStore(tmp_path / "fresh") as store:
        store.set_meta("game", "connect_four")
    with pytest.raises(ValueError, match="holds no run"):
        bench.kept_run(tmp_path / "fresh", 15, {})
    with pytest.raises(ValueError, match="no league store"):
        bench.kept_run(tmp_path / "missing", 15, {})


def test_with_both_sides_kept_nothing_runs_and_each_side_is_measured_from_its_own_store(tmp_path):
    """``--league-from`` and ``--selfplay-from`` together: runs made elsewhere (a GPU machine) are
    measured here, each side's exact NashConv from its own kept store, with the kept runs' seconds."""
    game = make_game("kuhn_poker", 1)
    kept = tmp_path / "kept" / "kuhn_poker"
    mixtures = {"league": ([leaning_model(game, 1, 2.0), leaning_model(game, 0, 2.0)], [0.5, 0.5]),
                "selfplay": ([leaning_model(game, 0, 10.0)], [1.0])}
    for side, (models, weights) in mixtures.items():
        nash_store(kept / f"{side}-seed1", "kuhn_poker", models, weights)
        with LeagueStore(kept / f"{side}-seed1", create=False) as store, store.transaction() as db:
            db.execute("INSERT INTO counters VALUES ('env_steps', 6000.0)")
        bench.write_run_record(kept / f"{side}-seed1", 60.0 if side == "league" else 30.0, 1.0,
                               bench.played_config("kuhn_poker", side, []))
    out = subprocess.run([sys.executable, "-m", "evaluation.compare", "--game", "kuhn_poker", "--minutes", "1",
                          "--seeds", "1", "--league-from", str(tmp_path / "kept"), "--selfplay-from",
                          str(tmp_path / "kept")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "min run" not in out.stderr  # nothing ran
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["league_from"] == result["selfplay_from"] == str(kept)
    for side, (models, weights) in mixtures.items():
        exact = exact_nash_conv(game, models, weights)["nash_conv"]
        assert result[side]["values"] == [pytest.approx(exact, abs=1e-9)], side
    assert result["league"]["values"] != result["selfplay"]["values"]  # the sides were not swapped
    assert result["league"]["env_steps_per_s"]["values"] == [100.0]  # 6,000 env steps over the record's 60 s
    assert result["selfplay"]["env_steps_per_s"]["values"] == [200.0]
    with pytest.raises(SystemExit):
        bench.parse_args(["--league-from", str(tmp_path / "nowhere")])


def test_selfplay_from_a_folder_that_is_not_there_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--selfplay-from", str(tmp_path / "nowhere")])
    assert exc.value.code == 2 and "--selfplay-from" in capsys.readouterr().err
    out = subprocess.run([sys.executable, "-m", "evaluation.compare", "--game", "connect_four", "--minutes", "15",
                          "--seeds", "1", "--selfplay-from", str(tmp_path)], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 2 and out.stderr.strip().endswith(f"{tmp_path}/connect_four/selfplay-seed1/league.db"), out.stderr
    assert "min run" not in out.stderr  # refused before any run


def test_bench_anchors_versus_scores_one_run_against_another_head_to_head(tmp_path):
    game = make_game("kuhn_poker", 1)
    nash_store(tmp_path / "a", "kuhn_poker", sharp_models(game, 2, seed=0), [0.5, 0.5])
    nash_store(tmp_path / "b", "kuhn_poker", [leaning_model(game, 0, 10.0)], [1.0])
    nash_store(tmp_path / "c4", "connect_four", sharp_models(make_game("connect_four", 1), 1, seed=0), [1.0])
    cmd = [sys.executable, "-m", "evaluation.anchor_scores", "--storage", str(tmp_path / "a"), "--anchors", "uniform",
           "--games", "20", "--versus-games", "3000", "--seed", "4"]
    out = subprocess.run([*cmd, "--versus", str(tmp_path / "b")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    expected = bench.head_to_head("kuhn_poker", {}, tmp_path / "a", tmp_path / "b", 3000, seed=4)
    assert line["versus"] == {"storage": str(tmp_path / "b"), **expected}
    assert line["versus"]["ci95"][0] > 0.5  # the passive mixture folds to every bet: it loses
    bad = subprocess.run([*cmd, "--versus", str(tmp_path / "c4")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode == 2 and "not of kuhn_poker" in bad.stderr, bad.stderr


def test_a_mixture_that_searches_plays_the_anchors_far_better_than_its_network(tmp_path):
    """Near-uniform nets, and the same nets choosing by PUCT search with one random rollout a leaf
    (100 simulations a move): tic-tac-toe's MCTS-100 beats the first almost always; the searching
    mixture draws or wins a large share (0.5 is a draw every game)."""
    from evaluation.search import SearchSpec

    game = make_game("tic_tac_toe", 1)
    near_uniform = [ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,))) for _ in range(2)]
    nash_store(tmp_path / "run", "tic_tac_toe", near_uniform, [0.5, 0.5])
    spec = SearchSpec(simulations=100, rollout_weight=1.0)
    plain, searched = bench.anchor_scores("tic_tac_toe", {}, tmp_path / "run", ["mcts:100"], 40, seed=0, search=spec)
    assert plain["mcts:100"] < 0.3 < 0.4 < searched["mcts:100"], (plain, searched)


def test_anchors_scored_in_several_processes_score_exactly_as_in_one(tmp_path):
    """``--jobs``: each anchor's games and seed are the same whichever process plays them."""
    from evaluation.search import SearchSpec

    game = make_game("tic_tac_toe", 1)
    nets = [ActorCritic(PolicySpec(game.obs_size, game.num_actions, (16,))) for _ in range(2)]
    nash_store(tmp_path / "run", "tic_tac_toe", nets, [0.3, 0.7])
    args = ("tic_tac_toe", {}, tmp_path / "run", ["uniform", "mcts:10"], 30, 3, SearchSpec(simulations=20))
    one = bench.anchor_scores(*args, jobs=1)
    assert bench.anchor_scores(*args, jobs=2) == one
    assert set(one[0]) == set(one[1]) == {"uniform", "mcts:10"}


def test_search_on_a_game_search_cannot_play_stops_the_bench_before_any_run(tmp_path, capsys):
    assert bench.main(["--game", "kuhn_poker", "--search", "50", "--storage", str(tmp_path)]) == 2
    assert "--search" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_bench_anchors_agent_scores_one_snapshot_of_each_run_not_its_mixture(tmp_path):
    """``--agent ID``: each run's snapshot ID plays (two runs' main agents after the same updates),
    against the anchors and head to head; the published mixtures (other members) play no part."""
    game = make_game("kuhn_poker", 1)
    bettor, passive = leaning_model(game, 1, 10.0), leaning_model(game, 0, 10.0)
    nash_store(tmp_path / "a", "kuhn_poker", [*sharp_models(game, 1, seed=0), bettor], [1.0, 0.0])
    nash_store(tmp_path / "b", "kuhn_poker", [*sharp_models(game, 1, seed=1), passive], [1.0, 0.0])
    cmd = [sys.executable, "-m", "evaluation.anchor_scores", "--storage", str(tmp_path / "a"), "--anchors", "uniform",
           "--games", "20", "--versus-games", "20000", "--seed", "4", "--versus", str(tmp_path / "b")]
    out = subprocess.run([*cmd, "--agent", "main_agent-0-v1"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["agent"] == "main_agent-0-v1" and line["support"] == 1
    # exact: the bettor in seat 0 against the passive net in seat 1, and the swap (Kuhn's returns in [-2, 2])
    as0 = (expected_returns_matrix("kuhn_poker", [bettor], [passive])[0, 0] + 2.0) / 4.0
    as1 = (-expected_returns_matrix("kuhn_poker", [passive], [bettor])[0, 0] + 2.0) / 4.0
    lo, hi = line["versus"]["ci95"]
    assert lo <= 0.5 * (as0 + as1) <= hi, (line["versus"], as0, as1)
    mixtures = bench.head_to_head("kuhn_poker", {}, tmp_path / "a", tmp_path / "b", 20000, seed=4)
    assert mixtures["ci95"][1] < lo or mixtures["ci95"][0] > hi  # the mixtures' score is another
    missing = subprocess.run([*cmd, "--agent", "main_agent-0-v7"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert missing.returncode == 2 and "no snapshot 'main_agent-0-v7'" in missing.stderr, missing.stderr
