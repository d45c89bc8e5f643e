"""evaluation.stored_run, the one reader of a run's store, and what every tool that reads a run
gets from it: a read-only open, one line for a missing, empty or foreign store or another game,
before any work; one error format across the command-line tools."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evaluation.stored_run import StoredRun, load_nash_mixture, load_subject
from league.errors import UsageError
from league.pool import AgentRecord, AgentType
from league.store import LeagueStore
from policies.net import ActorCritic, PolicySpec
from policies.snapshot import policy_to_bytes

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def kuhn_run(path: Path, n: int = 2, weights=(0.25, 0.75), game: str | None = "kuhn_poker") -> list[str]:
    """A store as the coordinator writes it: its game, ``n`` snapshots, a published mixture."""
    torch.manual_seed(0)
    ids = [f"main_agent-0-v{i}" for i in range(n)]
    with LeagueStore(path) as store:
        if game is not None:
            store.set_meta("game", game)
            store.set_meta("game_params", {})
        for i, agent_id in enumerate(ids):
            store.add_agent(AgentRecord(agent_id=agent_id, version=i, agent_type=AgentType.MAIN_AGENT),
                            policy_to_bytes(ActorCritic(PolicySpec(11, 2, (8,)))))
        store.save_nash(1.0, n, ids, list(weights), 0.5, 0.0, 0.01, "lp")
    return ids


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=ENV)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The one stderr line of a refused command, in the error format, with a nonzero exit."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, (out.returncode, out.stderr)
    assert lines[0].startswith("nash-league: ") and lines[0].count(": ") >= 2, lines[0]
    return lines[0]


def bad_stores(tmp_path: Path) -> dict[str, Path]:
    """A missing store, an empty (0-byte) file, an SQLite file of another program, and a file that
    is not SQLite at all."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "league.db").write_bytes(b"")
    (tmp_path / "foreign").mkdir()
    db = sqlite3.connect(tmp_path / "foreign" / "league.db")
    db.execute("CREATE TABLE notes (x TEXT)")
    db.commit()
    db.close()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "league.db").write_bytes(b"this is not sqlite" * 100)
    return {"missing": tmp_path / "nowhere", "empty": tmp_path / "empty", "foreign": tmp_path / "foreign",
            "garbage": tmp_path / "garbage"}


def files_of(path: Path) -> dict[str, bytes]:
    """The files of a run folder, without SQLite's WAL index and log of a reader (``-shm``, ``-wal``:
    a read-only connection to a WAL store may leave them; they hold no change)."""
    return ({p.name: p.read_bytes() for p in sorted(path.iterdir()) if not p.name.endswith(("-shm", "-wal"))}
            if path.is_dir() else {})


# -- the reader ------------------------------------------------------------------------
def test_a_missing_empty_or_foreign_store_is_refused_naming_why_and_left_as_it_was(tmp_path):
    for kind, run in bad_stores(tmp_path).items():
        before = files_of(run)
        with pytest.raises(UsageError) as exc:
            StoredRun(run)
        assert exc.value.what == "--storage" and str(run) in exc.value.why, (kind, exc.value)
        why = {"missing": "no league store", "empty": "empty file", "foreign": "not a nash-league store",
               "garbage": "not a readable nash-league store"}[kind]
        assert why in exc.value.why, (kind, exc.value.why)
        assert files_of(run) == before, kind  # nothing created, the empty file still 0 bytes
    assert (tmp_path / "empty" / "league.db").stat().st_size == 0


def test_the_reader_opens_read_only_and_writes_nothing(tmp_path):
    kuhn_run(tmp_path / "run")
    before = files_of(tmp_path / "run")
    with StoredRun(tmp_path / "run") as run:
        assert run.game == "kuhn_poker" and len(run.nash_mixture()[1]) == 2
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            run.store.set_meta("x", 1)
    assert files_of(tmp_path / "run") == before


def test_a_store_of_another_game_is_refused_naming_both_games(tmp_path):
    kuhn_run(tmp_path / "run")
    with pytest.raises(UsageError) as exc:
        StoredRun(tmp_path / "run", game="connect_four")
    assert exc.value.what == "--game connect_four" and "kuhn_poker league" in exc.value.why
    assert StoredRun(tmp_path / "run", game="kuhn_poker").game == "kuhn_poker"
    kuhn_run(tmp_path / "unnamed", game=None)  # a store that records no game takes the one asked for
    assert StoredRun(tmp_path / "unnamed", game="connect_four").game is None


def test_an_unknown_agent_names_the_id_and_the_first_known_ids(tmp_path):
    ids = kuhn_run(tmp_path / "run", n=7, weights=[1.0] + [0.0] * 6)
    with pytest.raises(UsageError) as exc:
        load_subject(tmp_path / "run", "nobody")
    assert exc.value.what == "--agent nobody"
    assert "no snapshot 'nobody'" in exc.value.why and ", ".join(ids[:5]) in exc.value.why
    assert ids[5] not in exc.value.why and "(7 in all)" in exc.value.why
    assert load_nash_mixture(tmp_path / "run")[0] == [ids[0]]


def test_a_store_without_a_published_mixture_says_so(tmp_path):
    LeagueStore(tmp_path / "run").close()
    with pytest.raises(UsageError, match="no published Nash mixture yet"):
        load_nash_mixture(tmp_path / "run")


# -- the tools -----------------------------------------------------------------------------
def test_exploitability_of_another_games_store_is_refused_at_once_not_walked(tmp_path):
    """Before: the connect_four tree walk ran on the Kuhn run's networks and never ended."""
    kuhn_run(tmp_path / "run")
    out = cli("evaluation.exploitability", "--game", "connect_four", "--storage", str(tmp_path / "run"), timeout=180)
    line = one_error_line(out)
    assert line.startswith("nash-league: --game connect_four: ") and "kuhn_poker league" in line


def test_exploitability_of_a_game_too_large_to_walk_is_refused_at_once(tmp_path):
    out = cli("evaluation.exploitability", "--game", "connect_four", "--uniform", timeout=180)
    line = one_error_line(out)
    assert line.startswith("nash-league: --game connect_four: ") and "evaluation.best_response" in line


def test_an_unknown_agent_is_one_line_not_a_key_error(tmp_path):
    ids = kuhn_run(tmp_path / "run")
    out = cli("evaluation.exploitability", "--storage", str(tmp_path / "run"), "--agent", "nobody")
    line = one_error_line(out)
    assert "KeyError" not in out.stderr and "Traceback" not in out.stderr
    assert line.startswith("nash-league: --agent nobody: no snapshot 'nobody'") and ids[0] in line


def test_the_report_of_an_empty_store_is_refused_and_the_file_stays_empty(tmp_path):
    """Before: exit 0, a report titled "None", and the 0-byte file made a store."""
    stores = bad_stores(tmp_path)
    for kind in ("empty", "foreign"):
        before = files_of(stores[kind])
        out = cli("monitoring.report", "--storage", str(stores[kind]))
        line = one_error_line(out)
        assert line.startswith("nash-league: --storage: ") and str(stores[kind]) in line, line
        assert files_of(stores[kind]) == before, kind  # no report.html, the store untouched
    assert (stores["empty"] / "league.db").stat().st_size == 0


def test_the_report_reads_a_store_without_writing_to_it(tmp_path):
    kuhn_run(tmp_path / "run")
    before = files_of(tmp_path / "run")
    out = cli("monitoring.report", "--storage", str(tmp_path / "run"), "--out", str(tmp_path / "r.html"), "--no-exact")
    assert out.returncode == 0, out.stderr
    assert files_of(tmp_path / "run") == before


@pytest.mark.parametrize("command", [
    ["evaluation.exploitability", "--storage", "{run}"],
    ["evaluation.best_response", "--storage", "{run}"],
    ["evaluation.anchor_scores", "--storage", "{run}", "--anchors", "uniform"],
    ["evaluation.pace", "--storage", "{run}"],
    ["serve.export", "--storage", "{run}", "--out", "{tmp}/out"],
    ["monitoring.report", "--storage", "{run}"],
    ["league.backup", "--storage", "{run}", "--out", "{tmp}/copy"],
])
@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_every_tool_refuses_a_missing_or_empty_store_in_the_one_error_format(tmp_path, command, kind):
    """Before: JSON on stderr, ``serve.export:``, ``monitoring.report: error:``, ``nash-league:
    backup failed:``; a report or a store made from nothing."""
    run = bad_stores(tmp_path)[kind]
    out = cli(*(a.format(run=run, tmp=tmp_path) for a in command))
    line = one_error_line(out)
    assert str(run) in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "copy").exists()
    if kind == "empty":
        assert (run / "league.db").stat().st_size == 0


def test_a_bad_option_is_the_one_error_line_too():
    out = cli("evaluation.exploitability", "--uniform")
    assert one_error_line(out) == "nash-league: evaluation.exploitability: --uniform needs --game (see --help)"
    out = cli("serve.export")
    assert one_error_line(out).startswith("nash-league: serve.export: the following arguments are required")


def test_compare_refuses_a_kept_run_that_is_not_a_store_in_the_error_format(tmp_path):
    (tmp_path / "connect_four" / "selfplay-seed1").mkdir(parents=True)
    (tmp_path / "connect_four" / "selfplay-seed1" / "league.db").write_bytes(b"")
    out = cli("evaluation.compare", "--game", "connect_four", "--minutes", "15", "--seeds", "1",
              "--selfplay-from", str(tmp_path), timeout=300)
    line = one_error_line(out)
    assert line.startswith("nash-league: --selfplay-from") and "empty file" in line
    assert (tmp_path / "connect_four" / "selfplay-seed1" / "league.db").stat().st_size == 0


# -- backup ---------------------------------------------------------------------------------
def test_backup_refuses_to_overwrite_a_file_without_force(tmp_path):
    """Before: an existing copy was replaced silently."""
    kuhn_run(tmp_path / "run")
    (tmp_path / "copy.db").write_bytes(b"an earlier copy")
    out = cli("league.backup", "--storage", str(tmp_path / "run"), "--out", str(tmp_path / "copy.db"))
    line = one_error_line(out)
    assert line.startswith(f"nash-league: --out {tmp_path / 'copy.db'}: ") and "--force" in line
    assert (tmp_path / "copy.db").read_bytes() == b"an earlier copy"
    out = cli("league.backup", "--storage", str(tmp_path / "run"), "--out", str(tmp_path / "copy.db"), "--force")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["agents"] == 2
    with StoredRun(tmp_path / "copy.db") as copy:
        assert copy.game == "kuhn_poker"


EXAMPLE = ROOT / "examples" / "dots_and_boxes"


def test_the_modules_a_config_names_and_the_folders_they_import_from(monkeypatch):
    from league.config import load_config
    from league.imports import config_modules, import_folders, module_folder

    cfg = load_config(EXAMPLE / "config_pettingzoo.yaml",
                      ["policy.net=examples.nets.layernorm_mlp:build",
                       "anchors=[uniform, evaluation.scripted:attack_nearest]"])
    assert config_modules(cfg) == ["boxes.aec", "examples.nets.layernorm_mlp", "evaluation.scripted"]
    monkeypatch.syspath_prepend(str(EXAMPLE))
    assert module_folder("boxes.aec") == module_folder("boxes") == str(EXAMPLE)  # a module, a package
    assert module_folder("examples.nets.layernorm_mlp") == str(ROOT)
    assert import_folders(cfg) == [str(EXAMPLE), str(ROOT)]
    assert module_folder("no_such_module") is None and module_folder("no_such_package.module") is None
    assert config_modules(load_config(ROOT / "configs" / "connect_four.yaml")) == []  # OpenSpiel, mlp, mcts


def test_a_users_game_loads_from_the_folder_its_store_records_from_any_directory(tmp_path):
    """The coordinator records where the config's own modules import from (``league.imports``); a
    tool reading the store finds a user's game there without the game's folder on PYTHONPATH."""
    torch.manual_seed(0)
    with LeagueStore(tmp_path) as store:
        store.set_meta("game", "boxes.vector:DotsAndBoxes")
        store.set_meta("game_params", {})
        store.add_agent(AgentRecord(agent_id="main_agent-0-v0", version=0, agent_type=AgentType.MAIN_AGENT),
                        policy_to_bytes(ActorCritic(PolicySpec(20, 12, (8,)))))
        store.save_nash(1.0, 1, ["main_agent-0-v0"], [1.0], 0.5, 0.0, 0.01, "lp")
    out = cli("evaluation.exploitability", "--storage", str(tmp_path))
    assert "cannot import module 'boxes.vector'" in one_error_line(out)  # a store that records no folder
    with LeagueStore(tmp_path, create=False) as store:
        store.set_meta("import_paths", [str(EXAMPLE), str(tmp_path / "gone")])
    before = files_of(tmp_path)
    out = cli("evaluation.exploitability", "--storage", str(tmp_path))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["game"] == "boxes.vector:DotsAndBoxes" and 0.0 <= report["nash_conv"] <= 2.0
    assert files_of(tmp_path) == before
    # the same report as with the game's folder on PYTHONPATH, as a user had to run it
    by_hand = subprocess.run([sys.executable, "-m", "evaluation.exploitability", "--storage", str(tmp_path)],
                             capture_output=True, text=True, timeout=300, cwd=ROOT,
                             env=dict(ENV, PYTHONPATH=os.pathsep.join([str(ROOT), str(EXAMPLE)])))
    assert json.loads(by_hand.stdout.strip().splitlines()[-1]) == report
