"""Running a league for a long time, as an operator does: an online backup resumed elsewhere (under
a half-minute ``operations.soak``), compaction that changes nothing a resume sees, and a full disk
survived, all on one league. The launcher as a subprocess, real Ray, SQLite on a real (small)
file system."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.outbox import ledgers, node_run_dir
from league.backup import league_state, state_digest
from league.config import load_config
from league.league import League
from league.retention import compact_results, compactable
from league.store import LeagueStore
from test_launch import ENV, ROOT, _wait_for_progress, assert_exact_accounting
from test_soak import assert_one_soak_line, soak_command

SMOKE = ROOT / "configs" / "smoke.yaml"


def _launch(storage, *overrides):
    cmd = [sys.executable, "-m", "actors.launch", "--config", str(SMOKE), f"run.storage={storage}", "serve.api=false",
           *overrides]
    return subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _stop(proc, lines):
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=240)
    lines.append(out)
    text = "".join(lines)
    assert proc.returncode == 0, text
    assert "stopped; the league is in" in text
    return text


def _ray_rotation(launcher_pid: int) -> tuple[set[str], set[str]]:
    """The log rotation flags Ray's processes of a launcher were started with (raylet, agents, log
    monitor, the worker command), and the rotation settings in its actors' environments."""
    import re

    from operations.soak import descendants

    flags, envs = set(), set()
    for pid in descendants(launcher_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        flags |= set(re.findall(r"--logging-rotate-[a-z-]+=\d+", cmd))
        if cmd.startswith("ray::"):
            envs |= {e.decode() for e in env if e.startswith(b"RAY_ROTATION_")}
    return flags, envs


def test_the_launcher_bounds_ray_logs_unless_the_user_did(monkeypatch):
    from actors.runtime import RAY_LOG_BACKUPS, RAY_LOG_MAX_BYTES, bound_ray_logs

    monkeypatch.delenv("RAY_ROTATION_MAX_BYTES", raising=False)
    monkeypatch.setenv("RAY_ROTATION_BACKUP_COUNT", "9")
    bound_ray_logs()
    assert os.environ["RAY_ROTATION_MAX_BYTES"] == str(RAY_LOG_MAX_BYTES) == str(64 * 2**20)
    assert os.environ["RAY_ROTATION_BACKUP_COUNT"] == "9" != str(RAY_LOG_BACKUPS)


def _restored(storage, path):
    """The league a coordinator restores from the store at ``path``, and its digest (read from a
    copy, so that the file under test stays byte for byte as it was)."""
    copy = Path(f"{path}.probe")
    shutil.copyfile(path, copy)
    try:
        with LeagueStore(copy, create=False) as store:
            league = League(load_config(SMOKE, [f"run.storage={storage}"]), store)
            return league_state(league), state_digest(league)
    finally:
        copy.unlink()


def _mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a size-limited tmpfs at ``path``; returns why not where the machine cannot, else None."""
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                       capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): {exc}"
    return None


def _fill(path: Path) -> int:
    """Write a ballast file until the file system has not one byte left; returns its size."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1):  # smaller and smaller: the last partial page too
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                continue
    finally:
        os.close(fd)
    return path.stat().st_size


def _coordinator_logs(storage) -> str:
    session = Path((node_run_dir(storage) / "ray_session").read_text().strip())
    text = []
    for p in (session / "logs").glob("*"):
        if p.is_file() and p.suffix in (".err", ".out", ".log"):
            try:
                text.append(p.read_text(errors="replace"))
            except OSError:
                continue
    return "\n".join(text)


def _stop_when(proc, lines, ready, timeout=180):
    """Ctrl-C the launcher once ``ready()`` holds (checked every second)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and not ready():
        time.sleep(1)
    return _stop(proc, lines)


@pytest.mark.ray
@pytest.mark.slow
def test_a_long_runs_operations_backup_compaction_full_disk_and_resume_elsewhere(tmp_path):
    """One league as an operator runs it for a long time, on a small file system of its own: it
    compacts its store as it goes; an online backup is taken while it runs; its disk fills (it stops
    acknowledging, loses nothing, says so) and empties (it goes on by itself). Then compaction of the
    copy changes nothing a resume sees, and the launcher resumes from the copy on another path with
    exactly the backed-up league, under a half-minute soak that prints its one JSON line."""
    disk, restored = tmp_path / "disk", tmp_path / "restored"
    cannot_mount = _mount_tmpfs(disk, "48m")
    run = (tmp_path if cannot_mount else disk) / "run"
    # retention every 5 s: compaction runs in the league, beside the full disk, and the count below spans it
    proc = _launch(run, "run.max_minutes=5", "run.progress_every_seconds=2", "league.compact_every_seconds=5",
                   "league.payoff_checkpoint_seconds=2", "evaluator.probe_every_seconds=0", "anchors=[]")
    lines: list[str] = []
    try:
        _wait_for_progress(proc, lines)
        # the running league has compacted its store, and again (so that its next pass is ~5 s
        # away), then a payoff checkpoint included batches since: what compaction of the copy removes
        compacted = _poll(lambda: _compacted(run), "a first compaction in the league")
        _poll(lambda: _compacted(run) > compacted, "another compaction in the league")
        _poll(lambda: _compactable(run) > 0, "batches under a payoff checkpoint since the last compaction")
        out = subprocess.run([sys.executable, "-m", "league.backup", "--storage", str(run), "--out", str(restored)],
                             cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        info = json.loads(out.stdout.strip().splitlines()[-1])
        assert info["out"] == str(restored / "league.db") and info["games"] > 0 and info["agents"] > 0
        # Ray's logs rotate: the raylet got the launcher's bound, every actor the variable that turns
        # rotation of its .out/.err on (Ray 2.60 rotates those only when it is set)
        flags, envs = _ray_rotation(proc.pid)
        assert flags == {"--logging-rotate-bytes=67108864", "--logging-rotate-backup-count=3"}, flags
        assert envs == {"RAY_ROTATION_MAX_BYTES=67108864", "RAY_ROTATION_BACKUP_COUNT=3"}, envs
        if not cannot_mount:
            _fill_the_disk_and_empty_it(proc, lines, disk, run)
        _stop_when(proc, lines, lambda: _games(run) > info["games"])  # the league moves past the copy
        with LeagueStore(run, create=False) as store:
            assert store.result_count() > info["games"]  # the copy is the league at one earlier commit
            assert store.get_meta("compacted_batches", 0) > 0  # compaction ran in the league
            assert_exact_accounting(store, run)  # acknowledged == stored, exactly; every snapshot loads
    finally:
        if proc.poll() is None:
            proc.kill()
        if not cannot_mount:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)

    backup_db = restored / "league.db"
    want, digest = _restored(restored, backup_db)
    # compaction of the copy: the same league for a resume, down to the last float
    frozen = tmp_path / "compacted.db"
    shutil.copyfile(backup_db, frozen)
    with LeagueStore(frozen, create=False) as store:
        games, batches = store.result_count(), len(store._query("SELECT 1 FROM results"))
        got = compact_results(store)
        assert got["batches"] > 0 and store.result_count() == games
        assert len(store._query("SELECT 1 FROM results")) == batches - got["batches"]
    assert _restored(restored, frozen) == (want, digest)

    # the launcher resumed from the copy, on another path, under a half-minute soak (operations.soak, as an
    # operator checks that a run stays flat): it starts with exactly the backed-up league, and the
    # soak prints its one JSON line
    out = subprocess.run(soak_command("--storage", str(restored)), cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert_one_soak_line(out)
    with LeagueStore(restored, create=False) as store:
        starts = store.events("coordinator_start")
        assert starts[-1]["state_digest"] == digest
        assert store.result_count() > info["games"]  # and it went on
        assert len(store.nash_history()) > info["nash_solves"]
        # the resumed league's own senders: every game acknowledged there is stored once, nothing
        # left pending (the launcher flushed them at its budget)
        assert [l["source"] for l in ledgers(restored) if l["pending"]] == []
        acked = sum(l["items"] for l in ledgers(restored) if not l["source"].startswith("learner:"))
        assert store.result_count() - info["games"] == acked == store.counters()["games"] - want["counters"]["games"]
    if cannot_mount:
        pytest.skip(f"the full-disk part: {cannot_mount}")


def _poll(ready, what: str, timeout: float = 90):
    """What ``ready()`` gives once truthy, checked every quarter second."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = ready()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"no {what} in {timeout:.0f} s")


def _compacted(storage) -> int:
    with LeagueStore(storage, create=False) as store:
        return store.get_meta("compacted_batches", 0)


def _compactable(storage) -> int:
    with LeagueStore(storage, create=False) as store:
        return compactable(store)["batches"]


def _games(storage) -> int:
    with LeagueStore(storage, create=False) as store:
        return store.result_count()


def _fill_the_disk_and_empty_it(proc, lines, disk, storage) -> None:
    """Fill the store's file system: the coordinator says so (progress line, its log) and stores
    nothing more while nothing crashes; empty it: the league goes on by itself."""
    ballast = disk / "ballast"
    _fill(ballast)
    deadline = time.time() + 90
    while time.time() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "STORE DISK FULL" in line:
            break
    assert "STORE DISK FULL" in lines[-1], "".join(lines[-20:])
    assert "STORE DISK FULL" in _coordinator_logs(storage)
    for _ in range(3):  # three progress lines: nothing crashed
        lines.append(proc.stdout.readline())
    assert proc.poll() is None
    # The store may still take writes that fit in space SQLite already holds (free pages that
    # compaction left in the database, WAL frames reused after a checkpoint): the coordinator's
    # probe then succeeds and it acknowledges what it stored. What it must not do is acknowledge a
    # write that failed; the exact accounting after the run checks that.
    games_full = _games(storage)
    ballast.unlink()  # space returns: the league goes on by itself
    deadline = time.time() + 120
    while time.time() < deadline and _games(storage) <= games_full:
        time.sleep(1)
    assert _games(storage) > games_full
    assert "store disk has space again" in _coordinator_logs(storage)
