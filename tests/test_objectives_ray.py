"""Grouped play and reward shaping in a real league on a local Ray (league.objectives): a main agent
in groups of 3 with a shaper that writes down what it is given, a main exploiter whose shaper raises;
and a grouped rollout worker killed mid-run, whose groups still reach the learner exactly once."""

import json
import time
from pathlib import Path

import numpy as np
import pytest

from actors.launch import load
from actors.league_run import LeagueRun

pytestmark = [pytest.mark.ray, pytest.mark.slow]
K = 3


def test_grouped_play_reaches_the_shaper_whole_and_a_failing_shaper_stops_only_its_learner(ray_local, tmp_path):
    ray = ray_local
    from league.store import LeagueStore

    log_path = tmp_path / "groups.jsonl"
    cfg, info = load([
        "--config", "configs/rps.yaml", f"run.storage={tmp_path / 'run'}", "run.max_minutes=10",
        "rollout.opponent_inference=inprocess", "serve.api=false", "evaluator.count=0",
        "rollout.envs_per_worker=64", "rollout.steps_per_batch=256", "roles.league_exploiter.count=0",
        "roles.main_agent.snapshot_every_steps=1000",
        f"roles.main_agent.objective={{k_opponents: {K}, shaper: 'tests.test_objectives:recording_shaper', "
        f"params: {{path: '{log_path}'}}}}",
        "roles.main_exploiter.objective={k_opponents: 2, shaper: 'tests.test_objectives:raising_shaper'}",
    ])
    league = LeagueRun(cfg, info)
    main, exploiter = league.learners["main_agent-0"], league.learners["main_exploiter-0"]
    try:
        league.supervise()
        deadline = time.time() + 120
        while time.time() < deadline:
            m, x = ray.get([main.info.remote(), exploiter.info.remote()])
            if m["updates"] >= 8 and x["skipped_updates"] >= 2 and league.status()["pool_size"] >= 2:
                break
            time.sleep(1)
        league.stop()
        m, x = ray.get([main.info.remote(), exploiter.info.remote()])
        pending = ray.get(main.buffered_groups.remote())
        logs_dir = Path(ray._private.worker._global_node.get_logs_dir_path())
    finally:
        league.kill()

    # the failing shaper cost its learner every update, and nothing else
    assert x["skipped_updates"] >= 2 and x["updates"] == 0 and "failed on purpose" in x["last_shaper_error"]
    assert m["updates"] >= 8 and m["skipped_updates"] == 0
    with LeagueStore(tmp_path / "run", create=False) as store:
        errors = store.events("shaper_error")
        rows = list(store.results_after())
    assert errors and {e["learner_id"] for e in errors} == {"main_exploiter-0"}
    assert "failed on purpose" in errors[0]["error"]
    logged = [p for p in logs_dir.glob("worker-*") if "main_exploiter-0 skipped an update" in p.read_text(errors="ignore")]
    assert logged, "the skipped update is not in any actor's log"

    # the shaper saw whole groups: k episodes, one version, the outcome vector = each episode's return
    seen = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert len(seen) >= 8 * 256 // K
    ids = [(g["source"], g["id"]) for g in seen]
    assert len(ids) == len(set(ids)), "a group reached the shaper twice"
    for g in seen:
        assert len(g["opponents"]) == len(g["outcomes"]) == K
        assert g["episodes"] == [1] * K  # biased RPS: the learner acts once in every episode
        assert [r[-1] for r in g["rewards"]] == pytest.approx(g["outcomes"])
        assert g["acted"] == [g["version"]] * K  # every decision of a group made by the group's version
    assert len({g["version"] for g in seen}) >= 4  # the learner moved on while groups were being played
    # the groups' outcomes are the games the coordinator recorded for the main agent, opponent by opponent
    got, want = learner_counts(seen, pending), stored_counts(rows, "main_agent-0")
    assert set(got) == set(want) and len(got) >= 2
    for b in want:
        assert got[b].tolist() == want[b].tolist(), b


def learner_counts(seen: list[dict], pending) -> dict[str, np.ndarray]:
    """Games, wins, draws and losses per opponent in the groups a learner was given: those its
    shaper saw (``seen``) and those still in its buffer (``pending``, EpisodeGroups)."""
    got: dict[str, np.ndarray] = {}
    for opponents, outcomes in [(g["opponents"], g["outcomes"]) for g in seen] + [
            ([p.opponents[c] for c in row], out) for p in pending for row, out in zip(p.opponent.tolist(),
                                                                                       p.outcomes.tolist())]:
        for b, r in zip(opponents, outcomes):
            got.setdefault(b, np.zeros(4))
            got[b] += [1, r > 0, r == 0, r < 0]
    return got


def stored_counts(batches: list, learner: str) -> dict[str, np.ndarray]:
    """The same per opponent from the store's result batches (payloads)."""
    want: dict[str, np.ndarray] = {}
    for batch in batches:
        names = batch.agents
        for i, j, g, w, d in zip(batch.a.tolist(), batch.b.tolist(), batch.games.tolist(), batch.wins.tolist(),
                                 batch.draws.tolist()):
            if names[i] == learner:
                want.setdefault(names[j], np.zeros(4))
                want[names[j]] += [g, w, d, g - w - d]
    return want


def test_a_rollout_worker_killed_mid_run_delivers_every_stored_group_to_the_learner_exactly_once(ray_local, tmp_path):
    """A grouped worker is killed while a delivery (its groups' games, transitions and groups, actors/outbox.py)
    is staged; its next life sends it again. Exact, at the end: the groups the learner was given are the
    groups whose games the store holds, opponent by opponent and in number (K games each), none twice;
    every delivery stored is one the learner took; the senders' ledger counts the games stored."""
    ray = ray_local
    from actors.outbox import Outbox, ledgers
    from league.store import LeagueStore

    storage = tmp_path / "run"
    log_path = tmp_path / "groups.jsonl"
    cfg, info = load([
        "--config", "configs/rps.yaml", f"run.storage={storage}", "run.max_minutes=10",
        "rollout.opponent_inference=inprocess", "serve.api=false", "evaluator.count=0",
        "rollout.envs_per_worker=64", "rollout.steps_per_batch=256", "roles.league_exploiter.count=0",
        "roles.main_exploiter.count=0", "roles.main_agent.snapshot_every_steps=1000",
        f"roles.main_agent.objective={{k_opponents: {K}, shaper: 'tests.test_objectives:recording_shaper', "
        f"params: {{path: '{log_path}'}}}}",
    ])
    league = LeagueRun(cfg, info)
    [wid] = league.workers
    learner, staged = league.learners["main_agent-0"], Outbox(storage, wid).pending_path

    def run_until(updates: int) -> None:
        deadline = time.time() + 60
        while ray.get(learner.info.remote())["updates"] < updates:
            assert time.time() < deadline, f"the learner did not reach {updates} updates"
            league.supervise()
            time.sleep(0.2)

    try:
        run_until(3)
        # a grouped worker has a delivery staged almost all the time (from staging one to booking its
        # replies, just before staging the next): kill until a kill leaves one behind (at most 3 kills)
        for _ in range(3):
            ray.kill(league.workers[wid], no_restart=False)
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(league.runs[wid], timeout=60)
            left_staged = staged.exists()
            league.supervise()  # the next life's loop: it re-sends what it finds staged first
            run_until(ray.get(learner.info.remote())["updates"] + 2)
            if left_staged:
                break
        assert left_staged
        league.stop()
        stats = ray.get(league.workers[wid].get_stats.remote())
        m = ray.get(learner.info.remote())
        pending = ray.get(learner.buffered_groups.remote())
    finally:
        league.kill()

    assert (stats["redelivered"], stats["deliveries_rejected"]) == (1, 0)
    seen = [json.loads(line) for line in log_path.read_text().splitlines()]
    ids = [(g["source"], g["id"]) for g in seen] + [(p.source, i) for p in pending for i in p.ids.tolist()]
    assert len(ids) == len(set(ids)), "a group reached the learner twice"
    assert len(ids) == m["groups_taken"]
    with LeagueStore(storage, create=False) as store:
        batches = [batch for batch in store.results_after() if batch.source == wid]
        games = store.result_count()
    # deliveries with groups (the others carry env steps only)
    delivered = {batch.seq for batch in batches if len(batch)}
    assert games == K * len(ids)
    assert len(delivered) == m["deliveries_taken"]
    got, want = learner_counts(seen, pending), stored_counts(batches, "main_agent-0")
    assert set(got) == set(want)
    for b in want:
        assert got[b].tolist() == want[b].tolist(), b
    [ledger] = [l for l in ledgers(storage) if l["source"] == wid]
    assert (ledger["items"], ledger["pending"]) == (games, False)
