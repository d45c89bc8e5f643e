from pathlib import Path

import pytest

from league.config import Config, ConfigError, PPOConfig, SearchConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_alphastar_roles():
    cfg = load_config()
    assert (cfg.roles.main_agent.count, cfg.roles.main_exploiter.count, cfg.roles.league_exploiter.count) == (1, 1, 2)
    assert cfg.roles.main_exploiter.reset_probability == 1.0
    assert cfg.roles.league_exploiter.reset_probability == 0.25
    assert (cfg.roles.main_agent.self_play, cfg.roles.main_agent.pfsp, cfg.roles.main_agent.forgotten) == (0.35, 0.5, 0.15)
    assert cfg.league.payoff_decay == 0.99


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("game: {name: leduc_poker}\nroles:\n  league_exploiter: {count: 3}\nrun: {max_minutes: 2}\n")
    cfg = load_config(path, ["run.max_minutes=0.5", "roles.main_agent.sampling=nash", "policy.hidden=[32,32]"])
    assert cfg.game.name == "leduc_poker" and cfg.run.max_minutes == 0.5
    assert cfg.roles.league_exploiter.count == 3
    assert cfg.roles.league_exploiter.reset_probability == 0.25  # role defaults kept
    assert cfg.roles.main_agent.sampling == "nash" and cfg.policy.hidden == [32, 32]


@pytest.mark.parametrize("override, key", [
    ("run.max_minuts=3", "run.max_minuts"),
    ("league.payoff_decay=-0.1", "league.payoff_decay"),
    ("league.payoff_decay=abc", "league.payoff_decay"),
    ("rollout.envs_per_worker=0", "rollout.envs_per_worker"),
    ("rollout.envs_per_worker=2.5", "rollout.envs_per_worker"),
    ("rollout.episodes_per_opponent=0", "rollout.episodes_per_opponent"),
    ("roles.main_agent.sampling=random", "roles.main_agent.sampling"),
    ("roles.coach.count=1", "roles.coach"),
    ("roles.main_agent.self_play=0.9", "roles.main_agent.self_play"),
    ("serve.port=70000", "serve.port"),
    ("rollout.opponent_inference=gpu", "rollout.opponent_inference"),
    ("evaluator.publish_candidates=0", "evaluator.publish_candidates"),
    ("snapshots.cache_mb=0", "snapshots.cache_mb"),
    ("policy.snapshot_average=1", "policy.snapshot_average"),
    ("policy.snapshot_average=-0.5", "policy.snapshot_average"),
    ("snapshots.cache_mb=nan", "snapshots.cache_mb"),
    ("snapshots.cache_idle_seconds=0", "snapshots.cache_idle_seconds"),
    ("ray.metrics_export_port=12000", "ray.metrics_export_port"),  # inside Ray's worker ports
    ("ray.metrics_export_port=0", "ray.metrics_export_port"),
    ("evaluator.exploitability_cpu_share=0", "evaluator.exploitability_cpu_share"),
    ("evaluator.exploitability_cpu_share=1.5", "evaluator.exploitability_cpu_share"),
    ("evaluator.games_cpu_share=0", "evaluator.games_cpu_share"),
    ("evaluator.games_cpu_share=nan", "evaluator.games_cpu_share"),
    ("evaluator.nice=20", "evaluator.nice"),
    ("evaluator.nice=-1", "evaluator.nice"),
    ("evaluator.nice=1.5", "evaluator.nice"),
    ("learner.nice=20", "learner.nice"),
    ("learner.nice=-1", "learner.nice"),
    ("learner.nice=high", "learner.nice"),
    ("search.simulations=-1", "search.simulations"),
    ("search.simulations=2.5", "search.simulations"),
    ("search.c_puct=0", "search.c_puct"),
    ("search.rollout_weight=1.5", "search.rollout_weight"),
    ("search.prior_temperature=nan", "search.prior_temperature"),
    ("search.batch=0", "search.batch"),
    ("search.anchor_games=-1", "search.anchor_games"),
    ("novalue", "novalue"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert info.value.key == key
    assert str(info.value).startswith(key)


@pytest.mark.parametrize("override, key, owners", [
    ("roles.main_exploiter.forgotten=0.1", "roles.main_exploiter.forgotten", "main_agent"),
    ("roles.main_agent.reset_probability=0.5", "roles.main_agent.reset_probability", "main_exploiter and league_exploiter"),
    ("roles.league_exploiter.live_threshold=0.2", "roles.league_exploiter.live_threshold", "main_agent and main_exploiter"),
    ("roles.main_agent.snapshot_win_rate=0.8", "roles.main_agent.snapshot_win_rate", "main_exploiter and league_exploiter"),
])
def test_a_key_of_another_role_is_an_error_naming_it_and_its_roles(override, key, owners):
    with pytest.raises(ConfigError) as info:
        load_config("configs/smoke.yaml", [override])
    assert info.value.key == key and "\n" not in str(info.value)
    assert str(info.value).startswith(f"{key}: a key of {owners}, not of this role")


def test_each_role_holds_only_the_keys_its_rules_read():
    from dataclasses import fields

    roles = Config().roles
    common = {"count", "sampling", "pfsp_weighting", "pfsp_exponent", "snapshot_every_steps", "objective", "learner"}
    exploiter = {"min_steps_before_snapshot", "snapshot_win_rate", "min_games_for_snapshot", "reset_probability",
                 "reset_to"}
    assert {f.name for f in fields(roles.main_agent)} == common | {
        "self_play", "pfsp", "forgotten", "forgotten_main_threshold", "forgotten_exploiter_threshold", "live_threshold"}
    assert {f.name for f in fields(roles.main_exploiter)} == common | exploiter | {"live_threshold"}
    assert {f.name for f in fields(roles.league_exploiter)} == common | exploiter


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("configs/*.yaml"),
                                                                           *ROOT.glob("examples/*/*.yaml")]))
def test_every_shipped_config_loads_with_its_role_keys(path):
    import yaml

    cfg = load_config(ROOT / path)
    for role, keys in (yaml.safe_load((ROOT / path).read_text()).get("roles") or {}).items():
        for key, value in keys.items():
            if key != "objective":
                assert getattr(getattr(cfg.roles, role), key) == value, (role, key)


@pytest.mark.parametrize("override, key", [
    ("ppo.lrr=0.1", "ppo.lrr"),
    ("ppo.lr=-1", "ppo.lr"),
    ("ppo.gamma=1.5", "ppo.gamma"),
    ("ppo.epochs=0", "ppo.epochs"),
    ("ppo.epochs=1.5", "ppo.epochs"),
    ("ppo.target_kl=0", "ppo.target_kl"),
    ("ppo.clip_value_loss=maybe", "ppo.clip_value_loss"),
])
def test_bad_ppo_settings_name_their_key(override, key):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert info.value.key == key and str(info.value).startswith(key)


def test_ppo_settings_are_typed():
    cfg = load_config("configs/smoke.yaml", ["ppo.lr_decay_steps=1000000"])
    assert (cfg.ppo.lr, cfg.ppo.epochs, cfg.ppo.minibatch_size) == (0.001, 2, 256)  # configs/smoke.yaml
    assert cfg.ppo.lr_decay_steps == 1e6 and cfg.ppo.clip == 0.2  # the rest: the defaults


def test_bad_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_config_roundtrips_through_dict():
    cfg = Config()
    assert load_config(None, []).to_dict() == cfg.validate().to_dict()


@pytest.mark.parametrize("override, key", [
    ("learner.num_gpus=-1", "learner.num_gpus"),
    ("learner.device=tpu", "learner.device"),
    ("learner.device=cuda", "learner.device"),  # a CUDA learner needs a GPU from Ray
    ("learner.scheduling=pack", "learner.scheduling"),
    ("learner.resources={GPU: 1}", "learner.resources"),
    ("rollout.resources={worker_slot: 0}", "rollout.resources.worker_slot"),
    ("rollout.resources={worker_slot: abc}", "rollout.resources.worker_slot"),
    ("rollout.num_cpus=-0.5", "rollout.num_cpus"),
    ("evaluator.scheduling=random", "evaluator.scheduling"),
    ("serve.num_replicas=0", "serve.num_replicas"),
    ("serve.autoscaling={min_replicas: 1}", "serve.autoscaling.max_replicas"),
    ("serve.autoscaling={min_replicas: 3, max_replicas: 2}", "serve.autoscaling.min_replicas"),
    ("serve.autoscaling={max_replicas: 2, target_requests: 4}", "serve.autoscaling.target_requests"),
    ("serve.autoscaling={max_replicas: 2, target_ongoing_requests: 0}", "serve.autoscaling.target_ongoing_requests"),
    ("serve.autoscaling={max_replicas: 2.5}", "serve.autoscaling.max_replicas"),
    ("serve.proxy_location=Everywhere", "serve.proxy_location"),
    ("ray.storage_resource=CPU", "ray.storage_resource"),
    ("ray.storage_resource=''", "ray.storage_resource"),
])
def test_bad_cluster_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert info.value.key == key
    assert str(info.value).startswith(key) and "\n" not in str(info.value)


def test_cluster_options_parse():
    cfg = load_config(None, ["learner.num_gpus=1", "learner.device=cuda:0", "rollout.scheduling=spread",
                             "rollout.resources={worker_slot: 1}", "ray.storage_resource=league_storage",
                             "serve.autoscaling={min_replicas: 1, max_replicas: 4, target_ongoing_requests: 2}"])
    assert cfg.learner.num_gpus == 1 and cfg.learner.device == "cuda:0"
    assert cfg.rollout.scheduling == "spread" and cfg.rollout.resources == {"worker_slot": 1}
    assert cfg.ray.storage_resource == "league_storage"
    assert cfg.serve.autoscaling["max_replicas"] == 4
    assert cfg.serve.proxy_location == "HeadOnly"  # the HTTP API is reached on the head only by default


@pytest.mark.parametrize("override, key", [
    ("evaluator.probe_every_seconds=-1", "evaluator.probe_every_seconds"),
    ("evaluator.probe_steps=0", "evaluator.probe_steps"),
    ("evaluator.probe_eval_episodes=0", "evaluator.probe_eval_episodes"),
    ("evaluator.publish=best", "evaluator.publish"),
])
def test_bad_probe_settings_name_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        load_config("configs/smoke.yaml", [override])
    assert err.value.key == key


def test_least_exploitable_publishing_needs_the_evaluator_that_measures_exploitability():
    for overrides in (["evaluator.exploitability=null"], ["evaluator.count=0"]):
        with pytest.raises(ConfigError) as err:
            load_config("configs/smoke.yaml", ["evaluator.publish=least_exploitable", *overrides])
        assert err.value.key == "evaluator.publish"


def test_least_exploitable_publishing_needs_a_game_with_exact_evaluation():
    from actors.launch import load

    with pytest.raises(ConfigError) as err:
        load(["--config", "configs/connect_four.yaml", "evaluator.publish=least_exploitable"])
    assert err.value.key == "evaluator.publish" and "exact" in str(err.value)
    cfg, _ = load(["--config", "configs/leduc_poker.yaml"])
    assert cfg.evaluator.publish == "least_exploitable"


def test_search_needs_a_perfect_information_game_and_anchors_to_be_scored_against():
    from actors.launch import load

    for args, why in ((["--config", "configs/leduc_poker.yaml", "search.simulations=50", "anchors=[uniform]"],
                       "perfect-information"),
                      (["--config", "configs/connect_four.yaml", "search.simulations=50", "anchors=[]"], "anchors")):
        with pytest.raises(ConfigError) as err:
            load(args)
        assert err.value.key == "search.simulations" and why in str(err.value)
    cfg, _ = load(["--config", "configs/connect_four.yaml", "search.simulations=50"])
    assert cfg.search.simulations == 50


def test_the_progress_line_shows_probe_and_nash_conv_beside_meta_exploitability():
    from actors.progress import quality_text

    assert quality_text({"meta_exploitability": 0.0}) == "meta-expl 0.000"
    assert quality_text({"meta_exploitability": 0.0, "meta_game_agents": 3, "pool_size": 40}) == (
        "meta-expl 0.000 over 3/40 agents")
    status = {"meta_exploitability": 0.0, "quality": {"nash_conv": {"value": 2.73},
                                                       "probe": {"value": 0.8, "ci95": [0.71, 0.89]}}}
    assert quality_text(status) == "meta-expl 0.000 NashConv 2.730 probe BR +0.800 [0.710, 0.890]"
    status["quality"]["meta_nash_conv"] = {"value": 1.2}
    assert quality_text(status) == "meta-expl 0.000 NashConv 2.730 (meta-Nash 1.200) probe BR +0.800 [0.710, 0.890]"


def test_a_pool_larger_than_the_snapshot_caches_is_warned_about_where_a_process_plays_it_all():
    """Connect Four's [256, 256] MLP has (126*256+256 + 256*256+256 + 256*7+7 + 256+1) float32
    weights, 401,440 bytes: 64 MB of cache holds 167 of them, so the shipped pool of 150 fits and a
    pool of 1000 is warned about, naming both keys (1000 of them need 383 MB). Kuhn's 1000 fit in
    the cache; Leduc's self-play with an exact evaluator plays no pool."""
    from actors.preflight import load_checked
    from actors.preflight import cache_warning, network_bytes

    def warning(config, *overrides):
        return cache_warning(*load_checked(config, overrides))

    c4 = warning("configs/connect_four.yaml", "league.pool_max_size=1000")
    cfg, info = load_checked("configs/connect_four.yaml", ())
    assert network_bytes(cfg, info) == 4 * (126 * 256 + 256 + 256 * 256 + 256 + 256 * 7 + 7 + 256 + 1)
    assert c4 is not None and "snapshots.cache_mb=64 holds 167" in c4 and "league.pool_max_size is 1000" in c4
    assert "raise snapshots.cache_mb to 383 or lower league.pool_max_size to 167" in c4
    # with the search value head (policy.search_value): its 257 weights and its one-byte flag
    with_head, info = load_checked("configs/connect_four.yaml", ("policy.search_value=true",))
    assert network_bytes(with_head, info) == network_bytes(cfg, info) + 4 * (256 + 1) + 1
    assert warning("configs/connect_four.yaml") is None
    assert warning("configs/connect_four.yaml", "league.pool_max_size=1000", "snapshots.cache_mb=400") is None
    assert warning("configs/kuhn_poker.yaml") is None and warning("configs/leduc_poker.yaml") is None
    assert warning("configs/leduc_poker.yaml", "roles.main_agent.sampling=pfsp") is not None
    for shipped in sorted((ROOT / "configs").glob("*.yaml")):  # no shipped config is warned about
        assert warning(str(shipped)) is None, shipped.name


def test_every_setting_has_its_meaning_and_the_roles_come_from_one_registry():
    import dataclasses
    import typing

    from league.config import ROLE_CONFIGS
    from league.pool import AgentType
    from league.roles import ROLES

    def walk(cls, key):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert f.metadata.get("doc"), f"{key}.{f.name} has no doc"
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{key}.{f.name}")

    walk(Config, "")
    assert list(ROLES) == list(ROLE_CONFIGS) == [f.name for f in dataclasses.fields(Config().roles)]
    assert [t.value for t in AgentType] == list(ROLES) and AgentType.main().config.main
    assert all(ROLES[name].config is c and ROLES[name].agent_type == name for name, c in ROLE_CONFIGS.items())


@pytest.mark.parametrize("make, key", [
    (lambda: PPOConfig(lr=0.0), "ppo.lr"),
    (lambda: PPOConfig(epochs=2.5), "ppo.epochs"),
    (lambda: SearchConfig(rollout_weight=float("nan")), "search.rollout_weight"),
])
def test_a_section_made_directly_is_checked_by_the_same_bounds(make, key):
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.key == key


@pytest.mark.parametrize("override", [
    "rollout.workers_per_learner=auto", "rollout.envs_per_worker=auto", "rollout.opponent_inference=auto",
    "learner.replicas=auto", "roles.main_exploiter.count=auto", "roles.league_exploiter.count=auto",
])
def test_auto_is_kept_for_the_plan_to_resolve(override):
    key, _ = override.split("=")
    section, *rest = key.split(".")
    node = getattr(load_config(None, [override]), section)
    for name in rest:
        node = getattr(node, name)
    assert node == "auto"


def test_learner_replicas_default_to_one():
    assert load_config().learner.replicas == 1
    assert load_config(None, ["learner.replicas=3"]).learner.replicas == 3


@pytest.mark.parametrize("override, key, why", [
    ("rollout.workers_per_learner=0", "rollout.workers_per_learner", "must be > 0 (or auto), got 0"),
    ("rollout.workers_per_learner=Auto", "rollout.workers_per_learner", "must be an integer (or auto), got 'Auto'"),
    ("rollout.envs_per_worker=2.5", "rollout.envs_per_worker", "must be an integer (or auto), got 2.5"),
    ("rollout.opponent_inference=gpu", "rollout.opponent_inference",
     "must be one of inprocess, serve (or auto), got 'gpu'"),
    ("learner.replicas=0", "learner.replicas", "must be >= 1 (or auto), got 0"),
    ("learner.replicas=two", "learner.replicas", "must be an integer (or auto), got 'two'"),
    ("roles.main_exploiter.count=-1", "roles.main_exploiter.count", "must be >= 0 (or auto), got -1"),
    ("roles.league_exploiter.count=1.5", "roles.league_exploiter.count", "must be an integer (or auto), got 1.5"),
    ("roles.main_agent.count=auto", "roles.main_agent.count", "must be an integer, got 'auto'"),  # not sized
    ("ppo.epochs=auto", "ppo.epochs", "must be an integer, got 'auto'"),
    ("learner.device=automatic", "learner.device", "must be auto, cpu, cuda or cuda:N, got 'automatic'"),
])
def test_auto_is_taken_only_where_a_setting_declares_it(override, key, why):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert err.value.key == key and str(err.value) == f"{key}: {why}"


def test_a_league_of_auto_exploiters_needs_a_main_agent_given():
    # an auto count may come to none (league.sizing): only a count given guarantees a learner
    with pytest.raises(ConfigError) as err:
        load_config(None, ["roles.main_agent.count=0", "roles.main_exploiter.count=auto",
                           "roles.league_exploiter.count=auto"])
    assert err.value.key == "roles.main_agent.count"


def test_auto_in_a_section_made_directly_is_checked_by_the_same_rule():
    from league.config import LearnerConfig, RolloutConfig, check

    check(RolloutConfig(workers_per_learner="auto", opponent_inference="auto"), "rollout")
    with pytest.raises(ConfigError) as err:
        check(RolloutConfig(workers_per_learner="many"), "rollout")
    assert err.value.key == "rollout.workers_per_learner"
    with pytest.raises(ConfigError) as err:
        check(LearnerConfig(replicas=0), "learner")
    assert err.value.key == "learner.replicas"
