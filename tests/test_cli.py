"""The ``nash-league`` console script: each subcommand is its ``python -m`` form."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nash_league.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
SCRIPT = Path(sys.executable).parent / "nash-league"


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=180, cwd=ROOT, env=ENV)


def test_the_commands_are_the_products_tools():
    assert {name: module for name, (module, _) in COMMANDS.items()} == {
        "run": "actors.launch", "report": "monitoring.report", "export": "serve.export", "backup": "league.backup",
        "exploitability": "evaluation.exploitability", "compare": "evaluation.compare"}


@pytest.mark.parametrize("args", [[], ["--help"]])
def test_nash_league_alone_or_help_lists_every_command(args):
    out = run(sys.executable, "-m", "nash_league.cli", *args)
    assert out.returncode == 0, out.stderr
    for name, (module, _) in COMMANDS.items():
        assert f"  {name} " in out.stdout and f"python -m {module}" in out.stdout


def test_an_unknown_command_is_one_error_line():
    out = run(sys.executable, "-m", "nash_league.cli", "frobnicate")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "nash-league: frobnicate: unknown command; nash-league's commands are run, report, export, backup, "
        "exploitability, compare (nash-league --help)"]


def test_a_subcommand_is_its_python_m_form():
    cli = run(sys.executable, "-m", "nash_league.cli", "report", "--help")
    module = run(sys.executable, "-m", "monitoring.report", "--help")
    assert cli.returncode == module.returncode == 0 and cli.stdout == module.stdout
    cli = run(sys.executable, "-m", "nash_league.cli", "exploitability", "--uniform", "--game", "kuhn_poker")
    module = run(sys.executable, "-m", "evaluation.exploitability", "--uniform", "--game", "kuhn_poker")
    assert cli.returncode == module.returncode == 0 and cli.stdout == module.stdout


def test_a_subcommand_imports_only_its_own_module():
    code = ("import sys\nfrom nash_league.cli import main\ntry:\n    main(['backup', '--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'ray', 'actors.launch', 'evaluation.compare') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = run(sys.executable, "-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "HEAVY []"


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is installed by pip install -e .")
def test_the_installed_script_runs_a_subcommand(tmp_path):
    out = run(str(SCRIPT), "backup", "--storage", str(tmp_path / "nowhere"), "--out", str(tmp_path / "copy"))
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [f"nash-league: --storage: no league store at {tmp_path}/nowhere/league.db"]
    assert run(str(SCRIPT), "--help").stdout == run(sys.executable, "-m", "nash_league.cli").stdout
