"""What a person reads of a game where no board is drawn: ``render_text`` and ``action_name``
of the OpenSpiel, PettingZoo and matrix adapters, checked against the games' own strings."""

import numpy as np
import pyspiel
import pytest

from envs import NO_ACTION, make_game
from envs.base import VectorGame


def play(game, seat, action):
    acts = np.full((game.num_envs, 2), NO_ACTION, dtype=np.int64)
    acts[0, seat] = action
    return game.step(acts)


def test_openspiel_text_and_names_are_openspiels_own():
    game = make_game("tic_tac_toe", 1, seed=0)
    assert game.render_text(0) == "...\n...\n..."
    assert game.action_name(0, 4) == "x(1,1)"
    play(game, 0, 4)
    assert game.render_text(0) == "...\n.x.\n..."
    assert game.action_name(0, 0) == "o(0,0)"  # seat 1 moves now


@pytest.mark.parametrize("seed", range(5))
def test_openspiel_text_is_the_state_after_the_adapters_own_chance(seed):
    game = make_game("leduc_poker", 1, seed=seed)
    state = pyspiel.load_game("leduc_poker").new_initial_state()
    for a in game.history(0):  # the deal the adapter drew, replayed on a fresh state
        state.apply_action(a)
    assert game.render_text(0) == str(state)
    player = state.current_player()
    assert [game.action_name(0, a) for a in state.legal_actions()] == \
        [state.action_to_string(player, a) for a in state.legal_actions()]
    assert {game.action_name(0, a) for a in state.legal_actions()} <= {"Fold", "Call", "Raise"}


def test_simultaneous_openspiel_names_seat_zeros_action():
    game = make_game("goofspiel", 1, seed=0)
    state = pyspiel.load_game("goofspiel").new_initial_state()
    for a in game.history(0):  # the point card the adapter drew
        state.apply_action(a)
    assert game.render_text(0) == str(state)
    assert game.action_name(0, 2) == state.action_to_string(0, 2) == "[P0]Bid: 3"


RANKS, SUITS = "A23456789TJQK", "SHDC"  # RLCard's card index: suit-major, ace first


def shown_cards(text, line):
    """The cards on the text's ``line`` ("hand", "public cards") as RLCard codes."""
    symbols = {"\u2660": "S", "\u2665": "H", "\u2666": "D", "\u2663": "C"}
    row = next(r for r in text.splitlines() if r.startswith(line + ":"))
    cards = row.split(":", 1)[1].split()
    return {symbols[c[-1]] + ("T" if c[:-1] == "10" else c[:-1]) for c in cards if c[-1] in symbols}


def observed_cards(obs):
    return {SUITS[i // 13] + RANKS[i % 13] for i in np.flatnonzero(obs[:52])}


@pytest.mark.parametrize("seed", range(4))
def test_holdem_text_shows_the_movers_hand_and_the_public_cards_of_its_observation(seed):
    pytest.importorskip("rlcard")
    game = make_game("pettingzoo:texas_holdem_v4", 1, seed=seed)
    assert [game.action_name(0, a) for a in range(4)] == ["Call", "Raise", "Fold", "Check"]
    rng = np.random.default_rng(seed)
    saw_flop = False
    for _ in range(40):
        seat = int(np.flatnonzero(game.movers()[0])[0])
        obs, mask = game.observe(seat, np.array([0]))
        text = game.render_text(0)
        assert text.startswith(f"{game.agents[seat]} to move\n")
        hand, public = shown_cards(text, "hand"), shown_cards(text, "public cards")
        assert len(hand) == 2 and len(public) in (0, 3, 4, 5)
        assert hand | public == observed_cards(obs[0]) and not hand & public
        saw_flop |= len(public) >= 3
        legal = np.flatnonzero(mask[0])
        # call or check where possible: hands reach the flop
        action = next((a for a in (3, 0) if a in legal), int(rng.choice(legal)))
        if play(game, seat, action).done[0]:
            break
    assert saw_flop


def test_matrix_games_name_their_actions_and_show_the_payoff_table():
    rps = make_game("rps", 1)
    assert [rps.action_name(0, a) for a in range(3)] == ["rock", "paper", "scissors"]
    rows = rps.render_text(0).splitlines()
    assert rows[1].split() == ["rock", "paper", "scissors"]
    assert [r.split() for r in rows[2:]] == [["rock", "0", "-1", "1"], ["paper", "1", "0", "-1"],
                                             ["scissors", "-1", "1", "0"]]
    pennies = make_game("matching_pennies", 1)
    assert [pennies.action_name(0, a) for a in range(2)] == ["heads", "tails"]
    custom = make_game("matrix", 1, payoff=[[1, -2, 0.5]])
    assert [custom.action_name(0, a) for a in range(3)] == ["0", "1", "2"]
    assert [r.split() for r in custom.render_text(0).splitlines()[1:]] == [["0", "1", "2"], ["0", "1", "-2", "0.5"]]


def test_the_protocols_defaults_name_the_index_and_show_the_movers_observation():
    game = make_game("kuhn_poker", 1, seed=0)
    obs = game.observe(int(np.flatnonzero(game.movers()[0])[0]), np.array([0]))[0][0]
    assert VectorGame.action_name(game, 0, 1) == "1"
    text = VectorGame.render_text(game, 0)
    assert text == "seat 0 to move; its observation: " + " ".join(f"{x:g}" for x in obs)
