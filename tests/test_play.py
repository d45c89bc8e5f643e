"""Play sessions against the Nash policy (serve/play.py): bounds, expiry, illegal moves, whole games, and the
text and named actions of games with no drawn board.

Real OpenSpiel, PettingZoo and matrix games and a real (untrained) policy network; no Ray."""

import numpy as np
import pytest
import torch

from envs import game_info
from policies.net import ActorCritic, PolicySpec
from serve.play import PlayError, PlayTable, playable


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def first_legal(obs, mask, rng):
    return int(np.flatnonzero(mask[0])[0])


def policy_agent(game_name):
    info = game_info(game_name)
    torch.manual_seed(0)
    model = ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(16,)))
    seen = []

    def agent(obs, mask, rng):
        seen.append((obs.copy(), mask.copy()))
        return int(model.act(obs, mask, generator=rng)[0][0])

    return agent, seen


def status_of(fn, *args):
    with pytest.raises(PlayError) as info:
        fn(*args)
    return info.value.status


def test_the_table_is_bounded_and_refuses_a_new_game_when_full():
    clock = Clock()
    table = PlayTable("tic_tac_toe", max_sessions=2, ttl_s=60, clock=clock)
    a = table.start("m", first_legal)["session"]
    table.start("m", first_legal)
    assert status_of(table.start, "m", first_legal) == 429
    assert len(table.sessions) == 2
    table.end(a)
    table.start("m", first_legal)  # a finished game frees its place
    assert len(table.sessions) == 2


def test_idle_games_expire_and_active_games_do_not():
    clock = Clock()
    table = PlayTable("tic_tac_toe", max_sessions=2, ttl_s=60, clock=clock)
    idle = table.start("m", first_legal)["session"]
    active = table.start("m", first_legal)["session"]
    for _ in range(3):  # 90 s in all, but never 60 s idle
        clock.t += 30
        table.view(active)
    assert status_of(table.view, idle) == 404
    assert table.view(active)["session"] == active
    clock.t += 61
    assert table.purge() == 1 and not table.sessions
    assert status_of(table.move, active, 0) == 404
    table.start("m", first_legal)
    table.start("m", first_legal)  # both places were freed by expiry


@pytest.mark.parametrize("action", [-1, 9, 4.0, True, "4", None, [4]])
def test_illegal_or_malformed_moves_get_a_422_and_change_nothing(action):
    table = PlayTable("tic_tac_toe")
    v = table.start("m", first_legal, seat=1)  # the league took cell 0 (first legal)
    assert v["board"]["cells"][0][0] == "league"
    sid = v["session"]
    assert status_of(table.move, sid, action) == 422
    assert status_of(table.move, sid, 0) == 422  # occupied
    assert table.view(sid)["history"] == v["history"]


def test_unknown_sessions_and_moves_after_the_end_are_refused():
    table = PlayTable("tic_tac_toe")
    assert status_of(table.view, "nope") == 404
    assert status_of(table.move, 12, 0) == 404
    assert status_of(table.end, "nope") == 404
    sid = table.start("m", first_legal)["session"]
    # you: the diagonal 0, 4, 8; the league plays the first free cells, 1 and 2
    for a in (0, 4, 8):
        v = table.move(sid, a)
    assert v["terminal"] and v["result"] == "win" and v["returns"] == {"you": 1.0, "league": -1.0}
    assert status_of(table.move, sid, 8) == 409
    assert status_of(table.start, "m", first_legal, 2) == 422


def test_a_whole_connect_four_game_against_a_policy_network():
    agent, seen = policy_agent("connect_four")
    table = PlayTable("connect_four")
    v = table.start("seed-0", agent, seed=3)
    sid, moves = v["session"], 0
    while not v["terminal"]:
        assert v["to_move"] == "you"
        columns = sorted({c for click in v["board"]["clicks"] for _, c in click["cells"]})
        assert columns == [a["action"] for a in v["legal_actions"]]  # clicking a column plays it
        v = table.move(sid, columns[0])
        moves += 1
        assert moves <= 21
    cells = sum(c != "" for row in v["board"]["cells"] for c in row)
    assert cells == len(v["history"]) == moves + len(seen)
    assert v["result"] in ("win", "loss", "draw") and v["board"]["clicks"] == []
    mine = v["returns"]["you"]
    assert v["result"] == {1.0: "win", -1.0: "loss", 0.0: "draw"}[mine] and v["returns"]["league"] == -mine
    # the league's seat saw the observation a league seat sees: player 1's tensor, 126 numbers
    assert all(o.shape == (1, 126) and m.shape == (1, 7) for o, m in seen)


def test_kuhn_shows_the_leagues_card_only_when_the_game_is_over():
    agent, seen = policy_agent("kuhn_poker")
    table = PlayTable("kuhn_poker")
    for seed in range(20):
        v = table.start("seed-0", agent, seat=seed % 2, seed=seed)
        assert v["cards"]["you"] in "JQK" and v["cards"]["league"] is None
        assert (v["history"] != []) == (seed % 2 == 1)  # seat 1: the league has already acted
        while not v["terminal"]:
            v = table.move(v["session"], v["legal_actions"][seed % len(v["legal_actions"])]["action"])
        assert v["cards"]["league"] in "JQK" and v["cards"]["league"] != v["cards"]["you"]
        assert v["returns"]["you"] in (-2.0, -1.0, 1.0, 2.0)
        table.end(v["session"])
    # the league's seat observed Kuhn's information-state tensor (11 numbers)
    assert seen and all(o.shape == (1, 11) for o, _ in seen)


def test_same_seed_same_game():
    runs = []
    for _ in range(2):
        agent, _ = policy_agent("kuhn_poker")
        v = PlayTable("kuhn_poker").start("m", agent, seat=1, seed=11)
        runs.append((v["cards"], v["history"]))
    assert runs[0] == runs[1]


def test_every_game_the_league_runs_is_playable():
    for name in ("connect_four", "tic_tac_toe", "kuhn_poker", "nim", "goofspiel", "biased_rps", "rps",
                 "pettingzoo:texas_holdem_v4"):
        assert playable(name), name
    assert playable("matrix", {"payoff": [[1, -1], [-1, 1]]})
    assert not playable("no_such_game") and not playable("pettingzoo:no_such_env_v0")
    assert not playable("matrix") and not playable("leduc_poker(players=3)")  # no payoff; three players


def test_a_whole_holdem_hand_against_a_policy_network_shows_the_hand_and_names_the_actions():
    pytest.importorskip("rlcard")
    agent, seen = policy_agent("pettingzoo:texas_holdem_v4")
    table = PlayTable("pettingzoo:texas_holdem_v4")
    for seed in range(6):
        v = table.start("seed-0", agent, seat=seed % 2, seed=seed)
        assert v["board"] is None and v["cards"] is None
        me = f"player_{seed % 2}"
        while not v["terminal"]:
            assert v["to_move"] == "you" and v["text"].startswith(f"{me} to move\nhand: ")
            labels = [a["label"] for a in v["legal_actions"]]
            assert labels and set(labels) <= {"Call", "Raise", "Fold", "Check"}
            assert [a["action"] for a in v["legal_actions"]] == sorted(
                ["Call", "Raise", "Fold", "Check"].index(label) for label in labels)
            # call or check: hands go on past the first round
            v = table.move(v["session"], next(a["action"] for a in v["legal_actions"] if a["label"] in ("Check", "Call")))
        assert v["legal_actions"] == [] and v["to_move"] is None
        mine = v["returns"]["you"]
        assert v["returns"]["league"] == -mine and -24 <= mine <= 24
        assert v["result"] == ("win" if mine > 0 else "loss" if mine < 0 else "draw")
        assert all(h["label"] == ["Call", "Raise", "Fold", "Check"][h["action"]] for h in v["history"])
        assert status_of(table.move, v["session"], 0) == 409
    # the league's seat observed what a league seat observes: hold'em's 72 numbers
    assert seen and all(o.shape == (1, 72) and m.shape == (1, 4) for o, m in seen)


def test_illegal_moves_in_a_holdem_hand_get_a_422_and_change_nothing():
    pytest.importorskip("rlcard")
    table = PlayTable("pettingzoo:texas_holdem_v4")
    v = table.start("m", first_legal, seed=4)
    legal = {a["action"] for a in v["legal_actions"]}
    for action in [a for a in range(4) if a not in legal] + [-1, 4, 1.0, "0", None, True]:
        assert status_of(table.move, v["session"], action) == 422
    assert table.view(v["session"]) == v


def test_rock_paper_scissors_the_league_chooses_without_seeing_the_persons_action():
    agent, seen = policy_agent("rps")
    table = PlayTable("rps")
    payoff = [[0, -1, 1], [1, 0, -1], [-1, 1, 0]]
    for seed in range(12):
        seat = seed % 2
        v = table.start("m", agent, seat=seat, seed=seed)
        assert v["to_move"] == "you" and v["history"] == [] and "rock" in v["text"]
        assert [a["label"] for a in v["legal_actions"]] == ["rock", "paper", "scissors"]
        before = len(seen)
        v = table.move(v["session"], seed % 3)
        assert len(seen) == before + 1
        obs, _ = seen[-1]  # the league's observation is its seat, nothing of the person's choice
        assert obs.tolist() == [[1.0, 0.0] if seat == 1 else [0.0, 1.0]]
        you, league = v["history"]
        assert you == {"by": "you", "action": seed % 3, "label": ["rock", "paper", "scissors"][seed % 3]}
        row, col = (you["action"], league["action"]) if seat == 0 else (league["action"], you["action"])
        assert v["terminal"] and v["returns"]["you"] == (payoff[row][col] if seat == 0 else -payoff[row][col])


def test_a_perfect_information_game_without_a_board_shows_its_position():
    table = PlayTable("nim")
    v = table.start("m", first_legal)
    assert v["board"] is None and v["text"] == "(0): 1 3 5 7"
    assert v["legal_actions"][0] == {"action": 0, "label": "pile:1, take:1;"}
    v = table.move(v["session"], 27)  # take all 7 of pile 4; the league (first legal) takes pile 1
    assert v["text"] == "(0): 0 3 5 0" and [h["label"] for h in v["history"]] == ["pile:4, take:7;", "pile:1, take:1;"]


def test_a_member_that_searches_plays_from_the_games_state_and_blocks_every_threat():
    """With the config's search the league's moves come from PUCT on the game's own state, not from
    its seat's observation: a person who drops every piece in the first column open (a threat of
    four in a column each time) never completes it and loses, while the network alone (untrained)
    is never asked."""
    from league.config import SearchConfig
    from evaluation.search import PUCT

    agent, seen = policy_agent("connect_four")
    table = PlayTable("connect_four")
    states = []

    def search(state, rng):
        states.append(state.history())
        return PUCT(table.game, None, SearchConfig(simulations=200), rng).step(state)

    v = table.start("seed-0", agent, seat=0, seed=5, search=search)
    assert v["search"] is True and v["to_move"] == "you"
    while not v["terminal"]:
        v = table.move(v["session"], v["legal_actions"][0]["action"])
    assert v["result"] == "loss" and seen == []
    league_moves = [h for h in v["history"] if h["by"] == "league"]
    assert len(states) == len(league_moves) and all(len(h) % 2 == 1 for h in states)  # asked on its turns only
    # the table passes the searcher a copy: the session's own state is the game that was played
    assert [h["action"] for h in v["history"]] == table.sessions[v["session"]].state.history()
    # a game not held as an OpenSpiel state (a VectorGame session) has no state to search from
    rps = PlayTable("matrix_rps")
    assert rps.start("seed-0", first_legal, seed=1, search=search)["search"] is False
