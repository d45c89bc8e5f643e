"""The league page (GET /) in a real browser: Debian's headless Chromium driven by Selenium
and chromium-driver, against a running Connect Four league (the launcher's League on a local
Ray, the HTTP API on Serve). `make test` installs chromium and chromium-driver (`make browser`).

The page's screenshot is kept at runs/artifacts/league-page.png (and in the test's tmp dir)."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import requests

from actors.launch import load
from actors.league_run import LeagueRun

pytestmark = [pytest.mark.ray, pytest.mark.slow]
PORT = 8014
URL = f"http://127.0.0.1:{PORT}"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[1] / "runs" / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1200,1400"]


def seed_snapshots(folder, n: int) -> list[str]:
    """Untrained Connect Four policies: real snapshots for the pool, so the Nash exists from the start."""
    import torch

    from envs import game_info
    from policies.net import ActorCritic, PolicySpec
    from policies.snapshot import policy_to_bytes

    info = game_info("connect_four")
    paths = []
    for i in range(n):
        torch.manual_seed(i)
        path = folder / f"c4-{i}.pt"
        path.write_bytes(policy_to_bytes(ActorCritic(PolicySpec(info.obs_size, info.num_actions, hidden=(32, 32)))))
        paths.append(str(path))
    return paths


def published_members(storage) -> set[str]:
    """Every agent with weight in a Nash mixture the league has published: the mixture can move on
    (the evaluator's results keep arriving) between a page's load and the end of a game."""
    from league.store import LeagueStore

    with LeagueStore(storage, create=False) as store:
        return {i for n in store.nash_history() for i, w in zip(n["ids"], n["weights"]) if w > 0}


@pytest.fixture(scope="module")
def league(ray_local, tmp_path_factory):
    storage = tmp_path_factory.mktemp("page_league")
    seeds = seed_snapshots(storage, 3)
    cfg, info = load(["--config", "configs/smoke.yaml", "game.name=connect_four", f"run.storage={storage / 'run'}",
                      "run.max_minutes=30", f"serve.port={PORT}", "roles.main_exploiter.count=0",
                      "roles.league_exploiter.count=0", "rollout.envs_per_worker=32", "evaluator.count=1",
                      "evaluator.exact=false", "evaluator.probe_every_seconds=0", "anchors=[]",
                      f"league.seed_snapshots={json.dumps(seeds)}"])
    lg = LeagueRun(cfg, info)
    lg.supervise()
    deadline = time.time() + 120
    while time.time() < deadline:
        lg.supervise()
        if len(requests.get(f"{URL}/nash", timeout=10).json()["agents"]) >= 1 and lg.status()["games"] > 0:
            break
        time.sleep(1)
    yield lg
    lg.stop()
    lg.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not try to download a driver
    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), \
        "Debian's chromium and chromium-driver are needed: `make browser` installs them"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def pause(lg) -> None:
    """Stop the games (workers and evaluators) but keep the coordinator and the API up."""
    import ray

    for actor in [*lg.workers.values(), *lg.evaluators.values()]:
        actor.stop.remote()
    ray.get(list(lg.runs.values()), timeout=120)
    time.sleep(1)  # the last result batches reach the coordinator


def wait(driver, condition, timeout=30.0):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: condition(d))


def test_the_page_shows_the_league_and_a_person_plays_connect_four(league, browser, tmp_path):
    from selenium.webdriver.common.by import By

    page = requests.get(f"{URL}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "http://" not in page.text and "https://" not in page.text  # self-contained: nothing external

    browser.get(f"{URL}/")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#mixture tbody tr"))

    # while the league plays: games/s appears after two /status readings, the pool table is /status's
    rate = wait(browser, lambda d: d.find_element(By.ID, "games-per-s").text not in ("", "–")
                and d.find_element(By.ID, "games-per-s").text)
    assert float(rate) > 0
    status = requests.get(f"{URL}/status", timeout=10).json()
    shown = {r.get_attribute("data-role"): int(r.find_elements(By.TAG_NAME, "td")[1].text)
             for r in browser.find_elements(By.CSS_SELECTOR, "#pool tbody tr")}
    assert set(shown) == set(status["pool_by_role"])

    # pause the games (Elo moves with every one), then the mixture table is /nash: members, roles, weights, Elo
    pause(league)
    for _ in range(10):
        nash = requests.get(f"{URL}/nash", timeout=10).json()
        browser.execute_async_script("refresh().then(arguments[0])")
        rows = [{k: r.get_attribute(f"data-{k}") for k in ("agent-id", "role", "weight", "elo")}
                for r in browser.find_elements(By.CSS_SELECTOR, "#mixture tbody tr")]
        if browser.find_element(By.ID, "mixture").get_attribute("data-solved-at") == str(nash["solved_at"]):
            break
    expected = sorted(nash["agents"], key=lambda a: -a["weight"])
    assert rows and [r["agent-id"] for r in rows] == [a["agent_id"] for a in expected]
    assert [r["role"] for r in rows] == [a["role"] for a in expected]
    assert [float(r["weight"]) for r in rows] == pytest.approx([a["weight"] for a in expected], abs=1e-12)
    assert [float(r["elo"]) for r in rows] == pytest.approx([a["elo"] for a in expected], abs=1e-9)
    assert nash["game"]["name"] == "connect_four" and browser.find_element(By.ID, "game").text == "connect_four"
    payoff = requests.get(f"{URL}/payoff", timeout=10).json()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#heatmap tr")) == len(payoff["ids"]) + 1

    # a whole game of Connect Four, by clicking the board
    browser.find_element(By.ID, "new-first").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#board .cell.legal"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#board .cell")) == 42
    clicks = 0
    while not browser.find_element(By.ID, "result").text:
        cells = browser.find_elements(By.CSS_SELECTOR, "#board .cell.legal")
        before = browser.find_element(By.ID, "history").text
        cells[clicks % len(cells)].click()
        clicks += 1
        wait(browser, lambda d: d.find_element(By.ID, "history").text != before)
        assert clicks <= 21  # a Connect Four player makes at most 21 moves
    result = browser.find_element(By.ID, "result").text
    session = browser.execute_script("return game.session")
    final = requests.get(f"{URL}/play/{session}", timeout=10).json()
    assert final["terminal"] and result.startswith({"win": "You win", "loss": "You lose", "draw": "Draw"}[final["result"]])
    placed = sum(c != "" for row in final["board"]["cells"] for c in row)
    assert placed == len(final["history"]) and sum(h["by"] == "you" for h in final["history"]) == clicks
    assert len(browser.find_elements(By.CSS_SELECTOR, "#board .cell.you")) == clicks
    assert final["agent_id"] in published_members(league.cfg.run.storage)

    shot = tmp_path / "league-page.png"
    browser.save_screenshot(str(shot))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "league-page.png")
    assert shot.stat().st_size > 10_000

    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def test_the_play_api_refuses_unknown_games_and_illegal_moves(league):
    assert requests.get(f"{URL}/play/no-such-game", timeout=10).status_code == 404
    r = requests.post(f"{URL}/play/no-such-game/move", json={"action": 0}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]
    v = requests.post(f"{URL}/play", json={"seat": 1}, timeout=10)
    assert v.status_code == 201, v.text
    v = v.json()
    assert v["game"] == "connect_four" and len(v["history"]) == 1 and v["history"][0]["by"] == "league"
    sid = v["session"]
    for body in ({"action": 7}, {"action": -1}, {"action": "3"}, {"action": True}, {"action": 3, "x": 1}, [3]):
        r = requests.post(f"{URL}/play/{sid}/move", json=body, timeout=10)
        assert r.status_code == 422 and r.json()["error"], (body, r.text)
    assert requests.post(f"{URL}/play", json={"seat": 2}, timeout=10).status_code == 422
    assert requests.post(f"{URL}/play/{sid}/move", data=b"{", headers={"Content-Type": "application/json"},
                         timeout=10).status_code == 400
    assert requests.get(f"{URL}/play/{sid}", timeout=10).json()["history"] == v["history"]  # nothing changed
    assert requests.delete(f"{URL}/play/{sid}", timeout=10).status_code == 200
    assert requests.get(f"{URL}/play/{sid}", timeout=10).status_code == 404
