"""The launcher as users run it: a subprocess, real Ray, real SIGINT, a resumed run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

import actors.preflight
import actors.runtime
from actors import launch
from actors.outbox import ledgers, node_run_dir
from actors.preflight import StorageInUse, check_storage_free, check_store, resume_warning
from league.store import recorded_game
from actors.runtime import SESSION_NAME, lock_storage, reap_leftovers, session_processes
from league.config import ConfigError, load_config
from league.store import LeagueStore
from serve.environment import SERVE_ENVIRONMENT

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
    assert len(lines) == 1 and lines[0].startswith(f"nash-league: config: {key}"), out.stderr
    assert "Started a local Ray" not in out.stdout + out.stderr


def _launch(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    """The launcher with ``args``, for arguments it refuses before Ray starts."""
    return subprocess.run([sys.executable, "-m", "actors.launch", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=ENV)


def _one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Started a local Ray" not in out.stdout + out.stderr
    return lines[0]


@pytest.mark.parametrize("game, fix", [
    ("connect_four", "run it with --config configs/connect_four.yaml "),
    ("liars_dice", "give it a config of its own with --config FILE "),  # no shipped config of its own
])
def test_a_game_on_the_default_config_is_told_to_use_its_own_config(tmp_path, game, fix):
    """Without --config the launcher runs configs/kuhn_poker.yaml, whose settings (it publishes the
    least exploitable mixture, which needs exact evaluation) do not fit every game: the error names
    the game and its config, not only a setting the user never made."""
    line = _one_error_line(_launch(f"game.name={game}", f"run.storage={tmp_path}"))
    assert line.startswith(f"nash-league: config: game.name: {game} needs its own config, not the default "
                           "configs/kuhn_poker.yaml (made for kuhn_poker): " + fix), line
    assert "evaluator.publish: least_exploitable needs a game with exact evaluation" in line, line


def test_a_setting_the_user_made_is_blamed_as_it_is(tmp_path):
    line = _one_error_line(_launch("game.name=connect_four", "evaluator.publish=least_exploitable",
                                   f"run.storage={tmp_path}"))
    assert line.startswith("nash-league: config: evaluator.publish: least_exploitable needs a game with exact "
                           "evaluation"), line
    assert "--config" not in line


@pytest.mark.parametrize("path", ["configs/connect_four.yaml", "configs/no_such.yml", "pyproject.toml"])
def test_a_config_file_given_without_config_is_asked_about(path):
    """A config file's name, or any file's path, where the key=value overrides go: the user meant --config."""
    assert _one_error_line(_launch(path)) == f"nash-league: {path}: did you mean --config {path}?"


def _store_of(storage: Path, game: str) -> Path:
    """A league store that records ``game`` (as the coordinator's first start writes it)."""
    with LeagueStore(storage) as store:
        store.set_meta("game", game)
    return storage / "league.db"


def _no_ray(*args, **kwargs):
    raise AssertionError("the launcher went on to start Ray")


def test_a_store_of_another_game_is_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    """Resuming a Kuhn poker store with Connect Four's config: one line naming both games and the
    fix, before Ray starts; the store is read, not written."""
    db = _store_of(tmp_path, "kuhn_poker")
    before = db.read_bytes()
    monkeypatch.setattr(actors.runtime, "RaySession", _no_ray)
    assert launch.main(["--config", "configs/connect_four.yaml", f"run.storage={tmp_path}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"nash-league: config: run.storage: {tmp_path} holds a kuhn_poker league, not connect_four: "
                     "give connect_four a new storage folder (run.storage=NEW_FOLDER), or resume that run with its "
                     "kuhn_poker config"]
    assert db.read_bytes() == before


def test_resuming_a_league_that_learned_another_way_warns_in_one_line_and_starts(tmp_path, monkeypatch, capsys):
    """A Connect Four store of the PPO config, resumed with the search config: one warning line naming
    the role and how it learned, then the launch goes on; the store is read, not written."""
    ppo = load_config("configs/connect_four_ppo.yaml", [f"run.storage={tmp_path}"])
    with LeagueStore(tmp_path) as store:
        store.set_meta("game", "connect_four")
        store.set_meta("config", ppo.to_dict())
    before = (tmp_path / "league.db").read_bytes()
    assert resume_warning(ppo) is None  # the same config: nothing to say
    monkeypatch.setattr(actors.runtime, "RaySession", _no_ray)
    with pytest.raises(AssertionError, match="went on to start Ray"):
        launch.main(["--config", "configs/connect_four.yaml", f"run.storage={tmp_path}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"nash-league: warning: run.storage {tmp_path} holds a league whose main_agent learned with ppo "
                     "and whose network had policy.activation tanh, not relu: its learners resume from their checkpoints, "
                     "networks included, and learn as this config says from here; a new run.storage starts afresh"]
    assert (tmp_path / "league.db").read_bytes() == before
    search = load_config("configs/connect_four.yaml", [f"run.storage={tmp_path}"])
    wider = load_config("configs/connect_four.yaml", [f"run.storage={tmp_path}", "policy.hidden=[512]"])
    with LeagueStore(tmp_path) as store:  # the network alone changed: named, setting by setting
        store.set_meta("config", search.to_dict())
    assert resume_warning(search) is None
    assert "whose network had policy.hidden [256, 256], not [512]: " in resume_warning(wider)
    older = search.to_dict()
    del older["policy"]["activation"]  # a store that recorded no activation: not compared
    with LeagueStore(tmp_path) as store:
        store.set_meta("config", older)
    assert resume_warning(load_config("configs/connect_four.yaml", [f"run.storage={tmp_path}",
                                                                     "policy.activation=tanh"])) is None
    assert "policy.hidden [256, 256], not [512]" in resume_warning(wider)
    with LeagueStore(tmp_path) as store:  # a store that kept no config (or a new run) warns of nothing
        store.set_meta("config", None)
    assert resume_warning(search) is None and resume_warning(load_config(
        "configs/connect_four.yaml", [f"run.storage={tmp_path / 'new'}"])) is None


def test_the_store_check_passes_a_store_of_the_same_game_and_what_is_not_a_store(tmp_path):
    cfg = load_config("configs/smoke.yaml", [f"run.storage={tmp_path / 'kuhn'}"])
    check_store(cfg)  # nothing there yet: a new run
    _store_of(tmp_path / "kuhn", "kuhn_poker")
    check_store(cfg)
    assert recorded_game(tmp_path / "kuhn") == "kuhn_poker"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "league.db").write_bytes(b"")
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "league.db").write_text("not a store")
    for folder in ("empty", "text", "none"):  # left to the coordinator, which says what is wrong
        assert recorded_game(tmp_path / folder) is None
    assert not (tmp_path / "none").exists() and (tmp_path / "empty" / "league.db").stat().st_size == 0
    with pytest.raises(ConfigError) as err:
        check_store(load_config("configs/rps.yaml", [f"run.storage={tmp_path / 'kuhn'}"]))
    assert err.value.key == "run.storage"


def test_a_storage_in_use_is_one_line_naming_the_folder(tmp_path, monkeypatch, capsys):
    def in_use(cfg, config_path):
        raise StorageInUse(cfg.run.storage, "4242")

    monkeypatch.setattr(actors.runtime, "RaySession", in_use)
    assert launch.main(["--config", "configs/smoke.yaml", f"run.storage={tmp_path}"]) == 3
    assert capsys.readouterr().err.strip().splitlines() == [
        f"nash-league: storage {tmp_path}: in use by another launcher (pid 4242); stop it first or choose another "
        "run.storage"]


def test_a_storage_another_launcher_holds_is_refused_before_the_network_is_checked(tmp_path, monkeypatch, capsys):
    """The launcher reads the storage's lock right after parsing the config: the refusal comes
    before the game's network is built (torch's import) and before Ray starts. A storage nobody
    holds passes, and the check writes nothing."""
    def network_check(cfg):
        raise AssertionError("the network was checked before the storage")

    monkeypatch.setattr(actors.preflight, "check_runnable", network_check)
    held = lock_storage(str(tmp_path / "run"))  # as a running launcher holds it
    try:
        assert launch.main(["--config", "configs/smoke.yaml", f"run.storage={tmp_path / 'run'}"]) == 3
    finally:
        held.close()
    assert capsys.readouterr().err.strip().splitlines() == [
        f"nash-league: storage {tmp_path / 'run'}: in use by another launcher (pid {os.getpid()}); stop it first or "
        "choose another run.storage"]
    check_storage_free(load_config("configs/smoke.yaml", [f"run.storage={tmp_path / 'run'}"]))  # let go: free
    check_storage_free(load_config("configs/smoke.yaml", [f"run.storage={tmp_path / 'new'}"]))
    assert not node_run_dir(tmp_path / "new").exists() and not (tmp_path / "new").exists()


def _holding(path: Path) -> subprocess.Popen:
    """A process that holds ``path`` open until killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'w'); print(1, flush=True); "
                             "time.sleep(600)", str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "1"
    return proc


def test_a_start_reaps_what_a_killed_run_left_of_its_ray_and_nothing_else(tmp_path):
    """A worker of a SIGKILLed launcher's Ray that has not exited (its logs open in the dead run's
    session folder) is killed by the next start on that storage; a process with files in another
    session folder, even one whose name begins the same, is not."""
    session = tmp_path / "ray" / "session_2026-11-27_01-32-21_420992_28007"
    storage = tmp_path / "store"
    leftover = _holding(session / "logs" / "worker-28183.out")
    bystanders = [_holding(Path(f"{session}1") / "logs" / "worker.out"), _holding(tmp_path / "elsewhere" / "f")]
    try:
        node_run_dir(storage).mkdir(parents=True, exist_ok=True)
        (node_run_dir(storage) / SESSION_NAME).write_text(str(session))
        assert reap_leftovers(str(storage)) == 1
        assert leftover.wait(timeout=30) == -signal.SIGKILL
        assert all(b.poll() is None for b in bystanders)
        assert not (node_run_dir(storage) / SESSION_NAME).exists()
        assert reap_leftovers(str(storage)) == 0  # nothing recorded: nothing touched
    finally:
        for proc in (leftover, *bystanders):
            proc.kill()
            proc.wait(timeout=30)


def run_until(cmd: list[str], seen, seconds: float = 240, cwd=ROOT, env=None):
    """The launcher (``cmd``) as a user runs it, its output read line by line until ``seen(line)``
    gives something other than None (or ``seconds`` pass), then stopped with Ctrl-C as a user does.
    ``env`` is its environment (default ``ENV``). Returns (exit code, all its output, what ``seen``
    gave or None)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=ENV if env is None else env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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


PORT = 8129
PROBE = ["evaluator.probe_every_seconds=5", "evaluator.probe_steps=20000", "evaluator.probe_eval_episodes=5000",
         "run.progress_every_seconds=2", "learner.checkpoint_every_seconds=5"]


def assert_probe_shown(status: dict, nash: dict, storage) -> None:
    """The probe of the Nash mixture on /status and /nash, with its interval; Kuhn is enumerable, so
    it carries the exact best-response value, which the trained best response's exact return cannot
    beat, and that exact return, which the probe's sampled mean estimates (within twice its 95% half
    width: a z of 3.9, so the check fails by chance about once in 10,000 runs)."""
    probe = status["quality"]["probe"]
    assert nash["quality"]["probe"]["value"] == pytest.approx(probe["value"]) or \
        nash["quality"]["probe"]["time"] >= probe["time"]
    low, high = probe["ci95"]
    assert low <= probe["value"] <= high
    assert probe["trained_exact_return"] <= probe["exact_br_return"] + 1e-9
    assert abs(probe["value"] - probe["trained_exact_return"]) <= high - low
    assert probe["exact_nash_conv"] == pytest.approx(2 * probe["exact_br_return"])
    with LeagueStore(storage, create=False) as store:
        rows = store.measurements("probe_br_return")
        assert rows and all(r["steps"] >= 20000 and r["episodes"] >= 5000 for r in rows)
        assert store.latest_measurement("probe_br_return")["time"] == rows[-1]["time"]


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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone meanwhile
        return ""


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
def test_a_sigkilled_launcher_resumes_exactly_and_ctrl_c_stops_it_cleanly(tmp_path):
    """SIGKILL the launcher mid-run (its local Ray dies with it), then run it again on the same
    storage: learners continue from their checkpoints, every acknowledged batch and snapshot is
    there once. Meanwhile a second launcher on that storage stops with one line, untouched. The
    resumed run publishes the least exploitable mixture instead of the meta-game Nash, and Ctrl-C
    stops it cleanly with the league complete in its store."""
    # the probe every 5 s, bigger than the shipped smoke config's, so that its interval is tight
    cmd = [sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", f"run.storage={tmp_path}",
           f"serve.port={PORT}", *PROBE, "run.max_minutes=5"]
    # Serve's settings as a user's shell has them (none): the launcher sets them for its Ray
    users_env = {k: v for k, v in ENV.items() if k not in SERVE_ENVIRONMENT}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=users_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        _wait_for_progress(proc, lines)
        # its Ray runs Serve's controller and the opponents' replica, and no HTTP proxy (serve.environment)
        names = [_cmdline(pid) for pid in session_processes((node_run_dir(tmp_path) / SESSION_NAME).read_text().strip())]
        assert any("ServeController" in n for n in names) and any("ServeReplica" in n for n in names), names
        assert not [n for n in names if "ProxyActor" in n], names
        second = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
        assert second.returncode == 3, second.stdout + second.stderr
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"nash-league: storage {tmp_path}: in use by another launcher"), err
        assert f"pid {proc.pid}" in err[0] and "Started a local Ray" not in second.stdout + second.stderr
        deadline = time.time() + 120
        while time.time() < deadline:  # every learner has checkpointed (every 5 s here, and after each snapshot)
            with LeagueStore(tmp_path, create=False) as store:
                if len(checkpoint_versions(store)) == 3 and min(checkpoint_versions(store).values()) > 0:
                    break
            time.sleep(2)
        time.sleep(3)  # batches and snapshots in flight
        proc.kill()
        proc.wait(timeout=60)
        # its Ray dies with it, normally within a few seconds (until then its coordinator may still
        # commit); a worker still stuck in its exit after a minute must be of the dead run's Ray
        # session, which the next start on this storage kills before it starts its own
        deadline = time.time() + 60
        while _holders(tmp_path / "league.db") and time.time() < deadline:
            time.sleep(0.5)
        session = (node_run_dir(tmp_path) / SESSION_NAME).read_text().strip()
        lingering = _holders(tmp_path / "league.db")
        reapable = session_processes(session)  # what the next start kills
        assert not [pid for pid in lingering if _alive(pid) and pid not in reapable], (lingering, reapable)
    finally:
        if proc.poll() is None:
            proc.kill()
    with LeagueStore(tmp_path, create=False) as store:
        checkpoints = checkpoint_versions(store)
        games_at_kill = store.result_count()
        first_pool = {a.agent_id for a in store.agents()}
        assert first_pool and store.latest_nash() is not None
    assert set(checkpoints) == {"main_agent-0", "main_exploiter-0", "league_exploiter-0"}
    assert (node_run_dir(tmp_path) / SESSION_NAME).exists()  # what the next start reaps

    def measured_and_probed(line):
        """/status and /nash once this run has measured its published mixture exactly and probed it."""
        if "NashConv" not in line or "meta-Nash" not in line or "probe BR +" not in line:
            return None
        with LeagueStore(tmp_path, create=False) as store:
            measured, probes = store.measurements("nash_conv"), store.measurements("probe_br_return")
            if not (store.result_count() > games_at_kill and measured and measured[-1]["method"] == "least_exploitable"
                    and probes and probes[-1]["time"] > measured[0]["time"]):
                return None
        return (requests.get(f"http://127.0.0.1:{PORT}/status", timeout=30).json(),
                requests.get(f"http://127.0.0.1:{PORT}/nash", timeout=30).json())

    code, text, seen = run_until([*cmd, "evaluator.publish=least_exploitable"], measured_and_probed)
    assert code == 0 and seen, text[-3000:]
    assert "stopped; the league is in" in text
    assert_probe_shown(*seen, tmp_path)
    assert not (node_run_dir(tmp_path) / SESSION_NAME).exists()
    assert not [pid for pid in lingering if _alive(pid)], "reaped by the resumed start"
    with LeagueStore(tmp_path, create=False) as store:
        evicted = {e["agent_id"] for e in store.events("evict")}
        assert first_pool - evicted <= {a.agent_id for a in store.agents()}
        assert store.result_count() > games_at_kill
        assert_resumed_from(store, checkpoints)
        assert len(store.events("coordinator_start")) == 2
        assert_exact_accounting(store, tmp_path)
        published, measured = store.latest_nash(), store.measurements("nash_conv")[-1]
        assert published["method"] == measured["method"] == "least_exploitable"
        assert store.measurements("meta_nash_conv"), "the meta-game Nash is measured beside what is published"
    from evaluation.exploitability import nash_conv_of_mixture
    from evaluation.stored_run import load_nash_mixture

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
