"""Games with no drawn board on the league page, played by clicking in a real browser (Debian's
headless Chromium through Selenium, as in tests/test_league_page.py) against real leagues:
Texas Hold'em from the shipped config (PettingZoo), and a user's own AEC game loaded by module
path (tests/data/nim_aec.py, Nim with 5 stones). The page shows the game's text and its legal
actions by name as buttons; the result it shows must be the server's. On Hold'em, `/nash/act`
answers real PettingZoo tables with legal actions of the published mixture's members."""

import contextlib
import json
import time

import numpy as np
import pytest
import requests
from test_league_page import browser, pause, published_members, wait  # noqa: F401 (browser is a fixture)

from actors.launch import load
from actors.league_run import LeagueRun

pytest.importorskip("rlcard")
pytestmark = [pytest.mark.ray, pytest.mark.slow]
PORT = 8015
URL = f"http://127.0.0.1:{PORT}"
HOLDEM_ACTIONS = ["Call", "Raise", "Fold", "Check"]


def seed_snapshots(folder, game: str, params: dict, n: int) -> list[str]:
    """Untrained policies of ``game``: real snapshots for the pool, so the Nash exists from the start."""
    import torch

    from envs import game_info
    from policies.net import ActorCritic, PolicySpec
    from policies.snapshot import policy_to_bytes

    info = game_info(game, **params)
    paths = []
    for i in range(n):
        torch.manual_seed(i)
        path = folder / f"seed-{i}.pt"
        path.write_bytes(policy_to_bytes(ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(32, 32)))))
        paths.append(str(path))
    return paths


@contextlib.contextmanager
def running_league(folder, config: str, game: str, params: dict, *overrides: str):
    """A short league of ``config`` with 3 seeded members and its HTTP API on PORT; its games are
    paused (the coordinator and the API stay up) once it has played some, so the page is quick."""
    seeds = seed_snapshots(folder, game, params, 3)
    cfg, info = load(["--config", config, f"game.name={game}", f"game.params={json.dumps(params)}",
                      f"run.storage={folder / 'run'}", "run.max_minutes=30", f"serve.port={PORT}",
                      "roles.main_exploiter.count=0", "roles.league_exploiter.count=0", "policy.hidden=[32,32]",
                      "rollout.envs_per_worker=16", "rollout.steps_per_batch=512", "evaluator.count=1",
                      "evaluator.games_per_pair=16", "league.nash_every_seconds=2",
                      "evaluator.probe_every_seconds=0", "anchors=[]",
                      f"league.seed_snapshots={json.dumps(seeds)}", *overrides])
    lg = LeagueRun(cfg, info)
    try:
        lg.supervise()
        deadline = time.time() + 120
        while time.time() < deadline:
            lg.supervise()
            if len(requests.get(f"{URL}/nash", timeout=10).json()["agents"]) >= 1 and lg.status()["games"] > 0:
                break
            time.sleep(1)
        pause(lg)
        yield lg
    finally:
        lg.stop()
        lg.kill()


def open_page(driver, game: str) -> dict:
    from selenium.webdriver.common.by import By

    nash = requests.get(f"{URL}/nash", timeout=10).json()
    assert nash["game"]["name"] == game and nash["game"]["playable"] is True
    driver.get(f"{URL}/")
    wait(driver, lambda d: d.find_element(By.ID, "game").text == game)
    driver.get_log("browser")  # drop what an earlier page logged (its league has stopped)
    assert driver.find_element(By.ID, "play-on").is_displayed() and driver.find_element(By.ID, "play-off").text == ""
    return nash


def holdem_decisions(n, seed=0):
    """Observations and legal masks of real PettingZoo hold'em decisions."""
    from pettingzoo.classic import texas_holdem_v4

    env = texas_holdem_v4.env()
    rng = np.random.default_rng(seed)
    obs, masks = [], []
    env.reset(seed=seed)
    while len(obs) < n:
        for agent in env.agent_iter():
            o, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            obs.append(o["observation"].astype(float).tolist())
            masks.append(o["action_mask"].astype(int).tolist())
            env.step(int(rng.choice(np.flatnonzero(o["action_mask"]))))
        env.reset()
    return obs[:n], masks[:n]


def new_game(driver, button: str) -> None:
    """Start a game with the page's ``button`` until the person has a move to make (a hand the
    league folds before the person acts is over at once)."""
    from selenium.webdriver.common.by import By

    for _ in range(10):
        before = driver.execute_script("return game && game.session")
        driver.find_element(By.ID, button).click()
        wait(driver, lambda d: d.execute_script("return game && game.session") not in (None, before))
        if driver.find_elements(By.CSS_SELECTOR, "#actions button"):
            return
    raise AssertionError("the league ended 10 games before the person could move")


def click_through(driver, choose, limit: int) -> tuple[int, list[str]]:
    """Click the action buttons (``choose`` picks one from their labels) until the page shows a
    result; how many clicks it took and the texts the page showed at each of the person's turns."""
    from selenium.webdriver.common.by import By

    clicks, texts = 0, []
    while not driver.find_element(By.ID, "result").text:
        buttons = driver.find_elements(By.CSS_SELECTOR, "#actions button")
        assert buttons and not driver.find_element(By.ID, "board").is_displayed()
        texts.append(driver.find_element(By.ID, "text").text)
        before = driver.find_element(By.ID, "history").text
        choose({b.text: b for b in buttons}).click()
        clicks += 1
        wait(driver, lambda d: d.find_element(By.ID, "history").text != before)
        assert clicks <= limit
    return clicks, texts


def lines(text: str) -> list[str]:
    """A text's lines as a browser shows them (trailing blanks dropped)."""
    return [line.rstrip() for line in text.strip().splitlines()]


def server_view(driver) -> dict:
    session = driver.execute_script("return game.session")
    final = requests.get(f"{URL}/play/{session}", timeout=10).json()
    assert final["terminal"] and final["legal_actions"] == []
    return final


def shows_the_servers_result(driver, final: dict, clicks: int) -> None:
    from selenium.webdriver.common.by import By

    result = driver.find_element(By.ID, "result").text
    label = {"win": "You win", "loss": "You lose", "draw": "Draw"}[final["result"]]
    mine = final["returns"]["you"]
    assert result == f"{label} ({mine:.0f})" if mine == int(mine) else result == f"{label} ({mine:.2f})"
    assert final["result"] == ("win" if mine > final["returns"]["league"] else
                               "loss" if mine < final["returns"]["league"] else "draw")
    assert driver.find_element(By.ID, "history").text == ", ".join(f"{h['by']}: {h['label']}" for h in final["history"])
    assert sum(h["by"] == "you" for h in final["history"]) == clicks
    assert lines(driver.find_element(By.ID, "text").text) == lines(final["text"])  # the person's last turn
    assert driver.find_elements(By.CSS_SELECTOR, "#actions button") == []
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def test_a_person_plays_a_hand_of_texas_holdem_on_the_page(ray_local, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By

    game = "pettingzoo:texas_holdem_v4"
    with running_league(tmp_path, "configs/pettingzoo_texas_holdem.yaml", game, {}):
        open_page(browser, game)
        new_game(browser, "new-first")
        labels = [(b.text, int(b.get_attribute("data-action")))
                  for b in browser.find_elements(By.CSS_SELECTOR, "#actions button")]
        assert labels and all(HOLDEM_ACTIONS[a] == name for name, a in labels)
        # call or check while possible: the hand goes past the first round
        clicks, texts = click_through(browser, lambda by: by.get("Check") or by.get("Call") or by["Fold"], 12)
        final = server_view(browser)
        shows_the_servers_result(browser, final, clicks)
        hands = {t.splitlines()[1] for t in texts}
        assert all(t.startswith("player_0 to move\nhand: ") for t in texts) and len(hands) == 1  # one hand dealt
        assert all(HOLDEM_ACTIONS[h["action"]] == h["label"] for h in final["history"])
        if final["history"][-1]["label"] == "Fold":  # who folds loses what they put in
            assert final["result"] == ("loss" if final["history"][-1]["by"] == "you" else "win")
        assert -24 <= final["returns"]["you"] <= 24 and final["returns"]["league"] == -final["returns"]["you"]
        assert final["agent_id"] in published_members(tmp_path / "run")
        browser.save_screenshot(str(tmp_path / "league-page-holdem.png"))
        assert (tmp_path / "league-page-holdem.png").stat().st_size > 10_000

        # /nash/act on real PettingZoo tables: a legal action for each, by members of the published mixture
        obs, masks = holdem_decisions(64)
        answer = requests.post(f"{URL}/nash/act", json={"observations": obs, "legal_masks": masks, "seed": 1},
                               timeout=30).json()
        assert len(answer["actions"]) == 64 and all(masks[i][a] == 1 for i, a in enumerate(answer["actions"]))
        assert set(answer["members"]) <= published_members(tmp_path / "run")
        nash = requests.get(f"{URL}/nash", timeout=10).json()
        assert abs(sum(a["weight"] for a in nash["agents"]) - 1.0) < 1e-6
        assert nash["game"]["obs_size"] == 72 and nash["game"]["num_actions"] == 4
        # the play API of a PettingZoo game answers bad input with a JSON 4xx
        v = next(v for v in (requests.post(f"{URL}/play", json={"seat": 1}, timeout=10).json() for _ in range(20))
                 if not v["terminal"])  # a hand the league folds at once is over before the person acts
        illegal = next(a for a in range(4) if a not in {x["action"] for x in v["legal_actions"]})
        for body, status in (({"action": illegal}, 422), ({"action": 4}, 422), ({"action": "0"}, 422),
                             ({"move": 0}, 422)):
            r = requests.post(f"{URL}/play/{v['session']}/move", json=body, timeout=10)
            assert r.status_code == status and r.json()["error"], (body, r.text)
        r = requests.post(f"{URL}/play/{v['session']}/move", data=b"\x80", headers={"Content-Type": "application/json"},
                          timeout=10)
        assert r.status_code == 400 and r.json()["error"]
        assert requests.get(f"{URL}/play/{v['session']}", timeout=10).json() == v
        r = requests.post(f"{URL}/play/nope/move", json={"action": 0}, timeout=10)
        assert r.status_code == 404 and r.json()["error"]


def test_a_person_plays_a_users_own_game_on_the_page(ray_local, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By

    game = "pettingzoo:tests.data.nim_aec"
    with running_league(tmp_path, "configs/smoke.yaml", game, {"render_mode": "ansi"}, "evaluator.exact=false"):
        open_page(browser, game)
        new_game(browser, "new-second")  # the league takes stones first
        # the game names no actions: its buttons are the action ids, and its ANSI text explains them
        clicks, texts = click_through(browser, lambda by: by["0"], 5)
        final = server_view(browser)
        shows_the_servers_result(browser, final, clicks)
        taken = [h["action"] + 1 for h in final["history"]]
        assert sum(taken) == 5 and all(h["label"] == str(h["action"]) for h in final["history"])
        # the text at each of the person's turns counts the stones the moves before it left
        mine = [i for i, h in enumerate(final["history"]) if h["by"] == "you"]
        for i, text in zip(mine, texts):
            left = 5 - sum(taken[:i])
            assert lines(text)[0] == f"{left} stone{'s' if left != 1 else ''} left: {'o ' * left}".strip()
        # whoever takes the last stone wins
        assert final["result"] == ("win" if final["history"][-1]["by"] == "you" else "loss")
