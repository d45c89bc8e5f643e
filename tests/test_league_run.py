"""The Python API's config handling (``nash_league.LeagueRun.start``), before anything starts.

A config given as a file is that file; None, or a dict, is the launcher's default config
(configs/kuhn_poker.yaml) with the dict's settings over it, as the launcher without ``--config``
runs it. Overrides as a dict of dotted keys are the launcher's ``key=value`` arguments. A bad key
stops ``start`` before Ray does, naming the key. The league it starts is tested in
tests/test_reproducible.py."""

import pytest
import yaml

import actors.league_run
from actors.launch import load
from actors.league_run import override_texts
from league.config import ConfigError
from league.store import LeagueStore
from nash_league import LeagueRun


def _dotted(data: dict, prefix: str = "") -> list[str]:
    """The launcher's ``key=value`` arguments that set what the config dict ``data`` holds."""
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out += _dotted(value, f"{prefix}{key}.")
        else:
            out += override_texts({f"{prefix}{key}": value})
    return out


def test_a_dict_config_and_the_launcher_start_from_the_same_default_config():
    """``{"game": {"name": "kuhn_poker"}}`` is the launcher with no arguments: its default config,
    not the built-in defaults under it."""
    from_dict, _ = LeagueRun.checked_config({"game": {"name": "kuhn_poker"}})
    from_cli, _ = load([])
    assert from_dict.to_dict() == from_cli.to_dict()
    assert LeagueRun.checked_config()[0].to_dict() == from_cli.to_dict()
    assert from_dict.evaluator.publish == "least_exploitable"  # configs/kuhn_poker.yaml's, not the built-in nash


def test_a_dict_config_is_the_default_config_with_its_settings_as_overrides():
    with open("configs/smoke.yaml") as f:
        content = yaml.safe_load(f)
    overrides = {"run.max_minutes": 0.5, "policy.hidden": [8, 8]}
    from_dict, _ = LeagueRun.checked_config(content, overrides)
    from_cli, _ = load([*_dotted(content), "run.max_minutes=0.5", "policy.hidden=[8, 8]"])
    assert from_dict.to_dict() == from_cli.to_dict()


def test_a_file_config_is_the_same_config_as_the_launchers():
    from_file, _ = load(["--config", "configs/smoke.yaml", "run.max_minutes=0.5", "policy.hidden=[8, 8]"])
    for overrides in ({"run.max_minutes": 0.5, "policy.hidden": [8, 8]},
                      ["run.max_minutes=0.5", "policy.hidden=[8, 8]"]):
        from_path, _ = LeagueRun.checked_config("configs/smoke.yaml", overrides)
        assert from_path.to_dict() == from_file.to_dict()


def test_overrides_keep_their_types_and_strings_stay_strings():
    cfg, _ = LeagueRun.checked_config({"game": {"name": "kuhn_poker"}}, {
        "run.storage": "runs/1e3", "run.seed": 7, "serve.api": False, "run.max_minutes": None})
    assert (cfg.run.storage, cfg.run.seed, cfg.serve.api, cfg.run.max_minutes) == ("runs/1e3", 7, False, None)


def test_a_game_on_the_default_config_is_told_to_use_its_own_config():
    with pytest.raises(ConfigError) as err:
        LeagueRun.checked_config({"game": {"name": "connect_four"}})
    assert err.value.key == "game.name"
    assert 'run it with LeagueRun.start("configs/connect_four.yaml")' in str(err.value), err.value


def _no_ray(*args, **kwargs):
    raise AssertionError("start went on to start Ray")


@pytest.mark.parametrize("config, overrides, key", [
    ({"run": {"max_minuts": 1}}, {}, "run.max_minuts"),
    ("configs/smoke.yaml", {"league.payoff_decay": 1.5}, "league.payoff_decay"),
    ("configs/smoke.yaml", ["ppo.lr=-1"], "ppo.lr"),
    ({"game": {"name": "no_such_game"}}, (), "game.name"),
    ({"game": {"name": "leduc_poker"}}, {"run.storage": "STORE"}, "run.storage"),  # a kuhn_poker store
])
def test_a_bad_config_raises_naming_the_key_before_ray_starts(config, overrides, key, tmp_path, monkeypatch):
    import ray

    if isinstance(overrides, dict) and overrides.get("run.storage") == "STORE":
        with LeagueStore(tmp_path) as store:
            store.set_meta("game", "kuhn_poker")
        overrides = {"run.storage": str(tmp_path)}
    monkeypatch.setattr(actors.league_run, "RaySession", _no_ray)
    with pytest.raises(ConfigError) as err:
        LeagueRun.start(config, overrides)
    assert err.value.key == key and not ray.is_initialized()
