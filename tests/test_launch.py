"""The launcher as users run it: a subprocess, real Ray, real SIGINT, a resumed run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.outbox import ledgers, node_run_dir
from league.store import LeagueStore

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")


@pytest.mark.parametrize("override, key", [
    ("run.max_minuts=1", "run.max_minuts"),
    ("league.payoff_decay=1.5", "league.payoff_decay"),
    ("ppo.lrr=0.1", "ppo.lrr"),
    ("ppo.lr=-1", "ppo.lr"),
    ("game.name=no_such_game", "game.name"),
    ("roles.main_exploiter.forgotten_xxx=0.1", "roles.main_exploiter.forgotten_xxx"),
    ("roles.main_exploiter.forgotten=0.1", "roles.main_exploiter.forgotten"),  # a main agent's key
])
def test_bad_config_stops_before_ray_with_one_line_naming_the_key(override, key):
    out = subprocess.run([sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", override],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nash-league: config error: {key}"), out.stderr
    assert "Started a local Ray" not in out.stdout + out.stderr


def run_until(cmd: list[str], seen, seconds: float = 240, cwd=ROOT):
    """The launcher (``cmd``) as a user runs it, its output read line by line until ``seen(line)``
    gives something other than None (or ``seconds`` pass), then stopped with Ctrl-C as a user does.
    Returns (exit code, all its output, what ``seen`` gave or None)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, got = [], None
    try:
        deadline = time.time() + seconds
        while got is None and time.time() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            lines.append(line)
            got = seen(line)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(lines), got


@pytest.mark.ray
@pytest.mark.slow
def test_sigint_stops_cleanly_and_the_league_resumes(tmp_path):
    cmd = [sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", f"run.storage={tmp_path}",
           "run.max_minutes=5"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "pool " in line and "env steps/s" in line and " pool 0 " not in line and "games 0 " not in line:
                break
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines)
    assert proc.returncode == 0, text
    assert "stopped; the league is in" in text
    with LeagueStore(tmp_path, create=False) as store:
        first_pool = {a.agent_id for a in store.agents()}
        first_games = store.counters()["games"]
        checkpoints = checkpoint_versions(store)
        assert first_pool and first_games > 0 and store.latest_nash() is not None
        assert set(checkpoints) == {"main_agent-0", "main_exploiter-0", "league_exploiter-0"}
        assert_exact_accounting(store, tmp_path)

    # resumed publishing the least exploitable mixture of the snapshots instead of the meta-game Nash
    out = subprocess.run([*cmd[:-1], "run.max_minutes=0.4", "evaluator.publish=least_exploitable"], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    with LeagueStore(tmp_path, create=False) as store:
        evicted = {e["agent_id"] for e in store.events("evict")}
        assert first_pool - evicted <= {a.agent_id for a in store.agents()}
        assert store.counters()["games"] > first_games
        assert_resumed_from(store, checkpoints)
        assert len(store.events("coordinator_start")) == 2
        assert store.measurements("nash_conv"), "the evaluator records the exact NashConv over time"
        assert_exact_accounting(store, tmp_path)
        published, measured = store.latest_nash(), store.measurements("nash_conv")[-1]
        assert published["method"] == measured["method"] == "least_exploitable"
        assert store.measurements("meta_nash_conv"), "the meta-game Nash is measured beside what is published"
    from policies.exploitability import load_nash_mixture, nash_conv_of_mixture

    _, models, weights = load_nash_mixture(tmp_path)  # what the league published, as the CLI reads it
    assert nash_conv_of_mixture("kuhn_poker", models, weights)["nash_conv"] == pytest.approx(measured["value"], abs=1e-6)

    # the report, rendered from this real run: every figure drawn from data
    from test_report import FIGURES, _images

    out = subprocess.run([sys.executable, "-m", "monitoring.report", "--storage", str(tmp_path)], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    images = _images((tmp_path / "report.html").read_text())
    assert set(images) == set(FIGURES)
    for key, (img, has_data) in images.items():
        assert has_data and img[..., :3].std() > 0.01, key


def checkpoint_versions(store) -> dict[str, int]:
    """Learner id -> the version saved in its checkpoint (the state blob, not the bookkeeping row)."""
    from policies.snapshot import learner_state_from_bytes

    return {l["learner_id"]: int(learner_state_from_bytes(store.load_learner(l["learner_id"])["state"])[2]["version"])
            for l in store.learners() if store.load_learner(l["learner_id"])["state"]}


def assert_resumed_from(store, checkpoints: dict[str, int]) -> None:
    """Each learner's last start began at its checkpoint's version, not at 0."""
    starts = {}
    for event in store.events("learner_start"):
        starts[event["learner_id"]] = event["version"]
    assert starts == checkpoints


def assert_exact_accounting(store, storage) -> None:
    """Games in acknowledged batches == games stored; acknowledged snapshots == stored ones, all loadable."""
    from policies.snapshot import policy_from_bytes

    books = ledgers(storage)
    acked = sum(l["items"] for l in books if not l["source"].startswith("learner:"))
    acked_ids = sorted(i for l in books if l["source"].startswith("learner:") for i in l["ids"])
    assert [l["source"] for l in books if l["pending"]] == []
    assert store.result_count() == acked == store.counters()["games"]
    assert sorted(a.agent_id for a in store.agents(include_removed=True) if a.learner_id) == acked_ids
    for agent_id in acked_ids:
        policy_from_bytes(store.snapshot_blob(agent_id))


def _holders(path: Path) -> list[int]:
    """Processes that have ``path`` open."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if any(os.readlink(fd) == str(path) for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _wait_for_progress(proc, lines, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "pool " in line and "env steps/s" in line and " pool 0 " not in line and "games 0 " not in line:
            return
    raise AssertionError("no progress:\n" + "".join(lines))


@pytest.mark.ray
@pytest.mark.slow
def test_sigkilled_launcher_resumes_from_its_checkpoints_with_exact_accounting(tmp_path):
    """SIGKILL the launcher mid-run (its local Ray dies with it), then run it again on the same
    storage: learners continue from their checkpoints, every acknowledged batch and snapshot is
    there once. Meanwhile a second launcher on that storage stops with one line, untouched."""
    cmd = [sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", f"run.storage={tmp_path}",
           "run.max_minutes=5"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        _wait_for_progress(proc, lines)
        second = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
        assert second.returncode == 3, second.stdout + second.stderr
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"nash-league: storage {tmp_path} is in use by another launcher"), err
        assert f"pid {proc.pid}" in err[0] and "Started a local Ray" not in second.stdout + second.stderr
        deadline = time.time() + 120
        while time.time() < deadline:  # every learner has checkpointed (every 30 s, and after each snapshot)
            with LeagueStore(tmp_path, create=False) as store:
                if len(checkpoint_versions(store)) == 3 and min(checkpoint_versions(store).values()) > 0:
                    break
            time.sleep(2)
        time.sleep(3)  # batches and snapshots in flight
        proc.kill()
        proc.wait(timeout=60)
        # its Ray dies with it, within a few seconds: until then its coordinator may still commit
        deadline = time.time() + 60
        while _holders(tmp_path / "league.db") and time.time() < deadline:
            time.sleep(0.5)
        assert not _holders(tmp_path / "league.db")
    finally:
        if proc.poll() is None:
            proc.kill()
    with LeagueStore(tmp_path, create=False) as store:
        checkpoints = checkpoint_versions(store)
        games_at_kill = store.result_count()
    assert set(checkpoints) == {"main_agent-0", "main_exploiter-0", "league_exploiter-0"}
    assert (node_run_dir(tmp_path) / "ray_session").exists()  # what the next start reaps

    out = subprocess.run([*cmd[:-1], "run.max_minutes=0.5"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (node_run_dir(tmp_path) / "ray_session").exists()
    with LeagueStore(tmp_path, create=False) as store:
        assert store.result_count() > games_at_kill
        assert_resumed_from(store, checkpoints)
        assert len(store.events("coordinator_start")) == 2
        assert_exact_accounting(store, tmp_path)
