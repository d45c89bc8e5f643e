"""The Python API's config handling (``nash_league.LeagueRun.start``), before anything starts.

A config given as a dict is the YAML file's content; overrides as a dict of dotted keys are the
launcher's ``key=value`` arguments. A bad key stops ``start`` before Ray does, naming the key.
The league it starts is tested in tests/test_reproducible.py."""

import pytest
import yaml

from actors.launch import load, load_checked, override_texts
from league.config import ConfigError
from nash_league import LeagueRun


def test_a_dict_config_is_the_same_config_as_its_yaml_file():
    with open("configs/smoke.yaml") as f:
        content = yaml.safe_load(f)
    from_file, _ = load(["--config", "configs/smoke.yaml", "run.max_minutes=0.5", "policy.hidden=[8, 8]"])
    from_dict, _ = load_checked(content, override_texts({"run.max_minutes": 0.5, "policy.hidden": [8, 8]}))
    assert from_dict.to_dict() == from_file.to_dict()
    from_list, _ = load_checked("configs/smoke.yaml", override_texts(["run.max_minutes=0.5", "policy.hidden=[8, 8]"]))
    assert from_list.to_dict() == from_file.to_dict()


def test_overrides_keep_their_types_and_strings_stay_strings():
    cfg, _ = load_checked({"game": {"name": "kuhn_poker"}}, override_texts(
        {"run.storage": "runs/1e3", "run.seed": 7, "serve.api": False, "run.max_minutes": None}))
    assert (cfg.run.storage, cfg.run.seed, cfg.serve.api, cfg.run.max_minutes) == ("runs/1e3", 7, False, None)


@pytest.mark.parametrize("config, overrides, key", [
    ({"run": {"max_minuts": 1}}, {}, "run.max_minuts"),
    ("configs/smoke.yaml", {"league.payoff_decay": 1.5}, "league.payoff_decay"),
    ("configs/smoke.yaml", ["ppo.lr=-1"], "ppo.lr"),
    ({"game": {"name": "no_such_game"}}, (), "game.name"),
])
def test_a_bad_config_raises_naming_the_key_before_ray_starts(config, overrides, key):
    import ray

    with pytest.raises(ConfigError) as err:
        LeagueRun.start(config, overrides)
    assert err.value.key == key and not ray.is_initialized()
