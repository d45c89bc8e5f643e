"""league.sizing: the auto values of a config resolved from the cluster's resources.

On 2 cores without a GPU, ``auto`` picks each shipped config's plan from before ``auto``; on
16 cores with a GPU, and on bigger clusters, the plan follows the rules of league/sizing.py."""

from pathlib import Path

import pytest

from league.config import load_config
from league.sizing import Resources, plan

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("configs/*.yaml"), *ROOT.glob("examples/*/config*.yaml")])

# What each shipped config ran with before it said auto (commit 4b61c61, the configs as loaded):
# workers_per_learner, envs_per_worker, opponent_inference, learner.replicas (1: one process a
# learner, as every league ran), learner.device, learner.num_gpus, main and league exploiters, and
# where the learners' own moves play (in the worker, as every league ran).
BEFORE_AUTO = {
    "configs/battle.yaml": (1, 16, "inprocess", 1, "auto", 0.0, 0, 0, "inprocess"),
    "configs/cluster.yaml": (2, 2048, "serve", 1, "auto", 0.0, 1, 2, "inprocess"),
    "configs/connect_four.yaml": (1, 1024, "inprocess", 1, "auto", 0.0, 0, 0, "inprocess"),
    "configs/connect_four_ppo.yaml": (1, 1024, "inprocess", 1, "auto", 0.0, 0, 0, "inprocess"),
    "configs/dominant.yaml": (1, 256, "inprocess", 1, "auto", 0.0, 1, 1, "inprocess"),
    "configs/kuhn_poker.yaml": (1, 2048, "serve", 1, "auto", 0.0, 1, 2, "inprocess"),
    "configs/kuhn_selfplay.yaml": (1, 2048, "serve", 1, "auto", 0.0, 0, 0, "inprocess"),
    "configs/leduc_poker.yaml": (1, 2048, "serve", 1, "auto", 0.0, 0, 0, "inprocess"),
    "configs/pettingzoo_texas_holdem.yaml": (1, 256, "serve", 1, "auto", 0.0, 1, 1, "inprocess"),
    "configs/rps.yaml": (1, 256, "serve", 1, "auto", 0.0, 1, 1, "inprocess"),
    "configs/smoke.yaml": (1, 64, "serve", 1, "auto", 0.0, 1, 1, "inprocess"),
    "configs/tic_tac_toe.yaml": (1, 256, "serve", 1, "auto", 0.0, 0, 0, "inprocess"),
    "examples/dots_and_boxes/config.yaml": (1, 64, "serve", 1, "auto", 0.0, 1, 1, "inprocess"),
    "examples/dots_and_boxes/config_pettingzoo.yaml": (1, 64, "serve", 1, "auto", 0.0, 1, 1, "inprocess"),
}
KEYS = ("rollout.workers_per_learner", "rollout.envs_per_worker", "rollout.opponent_inference", "learner.replicas",
        "learner.device", "learner.num_gpus", "roles.main_exploiter.count", "roles.league_exploiter.count",
        "rollout.policy_inference")
TWO_CORES = Resources(cpus=2, gpus=0, nodes=1)


def values(cfg):
    out = []
    for key in KEYS:
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        out.append(node)
    return tuple(out)


def test_every_shipped_config_has_its_plan_from_before_auto():
    assert sorted(BEFORE_AUTO) == SHIPPED, "a new shipped config: add its plan to BEFORE_AUTO"


@pytest.mark.parametrize("path", SHIPPED)
def test_on_two_cores_auto_picks_the_shipped_plan(path):
    cfg = load_config(ROOT / path)
    resolved, the_plan = plan(cfg, TWO_CORES)
    assert values(resolved) == BEFORE_AUTO[path]
    # and nothing else changes: the config with the old values written in is the resolved one
    assert resolved == load_config(ROOT / path, [f"{k}={v}" for k, v in zip(KEYS, BEFORE_AUTO[path])])
    assert the_plan.value("learner.device") == "cpu"


def test_some_shipped_configs_leave_their_plan_to_auto():
    autos = {path: [k for k, v in zip(KEYS, values(load_config(ROOT / path))) if v == "auto" and k != "learner.device"]
             for path in SHIPPED}
    assert autos["configs/connect_four_ppo.yaml"] == ["rollout.workers_per_learner", "rollout.opponent_inference",
                                                  "learner.replicas", "roles.main_exploiter.count",
                                                  "roles.league_exploiter.count", "rollout.policy_inference"]
    assert autos["configs/kuhn_poker.yaml"] == ["rollout.workers_per_learner", "rollout.envs_per_worker",
                                                "learner.replicas"]
    assert autos["configs/smoke.yaml"] == []  # the tests' league keeps its shape on any machine


def test_sixteen_cores_and_a_gpu():
    cfg = load_config(ROOT / "configs/connect_four_ppo.yaml")
    resolved, the_plan = plan(cfg, Resources(cpus=16, gpus=1))
    # 16 less the coordinator 0.5, the evaluator 1, the anchor judge 0.2 and the opponents replica
    # 0.2 (served: there is a GPU) leave 14.1; 4 CPUs keep a learner process busy, so the main agent,
    # a main exploiter and a league exploiter (12), not a second league exploiter (16); no second
    # replica of 3 learners (24); 14.1 - 3 learner cores = 11.1 over 3 processes: 3 workers each
    assert values(resolved) == (3, 1024, "serve", 1, "auto", 0.25, 1, 1, "serve")
    assert the_plan.value("learner.device") == "cuda"
    assert (the_plan.opponents_device, the_plan.opponents_num_gpus) == ("cuda", 0.25)  # 3 learners + 1 replica
    assert resolved.serve.num_gpus == 0.25  # the share each opponents replica asks Ray for
    assert ("  rollout.opponent_inference = serve on cuda with serve.num_gpus = 0.25  (auto: a GPU serves one "
            "batch across workers)") in the_plan.lines()
    assert ("  rollout.policy_inference = serve on cuda with serve.num_gpus = 0.25  (auto: the GPU plays the "
            "learners' moves too, one batch across workers)") in the_plan.lines()


def test_a_search_learner_plays_its_own_moves_on_any_machine():
    cfg = load_config(ROOT / "configs/connect_four.yaml")
    resolved, the_plan = plan(cfg, Resources(cpus=16, gpus=1))
    assert (resolved.rollout.opponent_inference, resolved.rollout.policy_inference) == ("serve", "inprocess")
    assert ("  rollout.policy_inference = inprocess in the workers' processes  (auto: roles.main_agent learns from "
            "search, whose leaves are evaluated in the worker: served, each simulation waits a round trip)"
            ) in the_plan.lines()


def test_an_evaluator_of_greedy_snapshots_is_not_given_a_core():
    """Greedy snapshots in a deterministic game: the evaluator plays each pair's two games once
    (actors.evaluator), so the plan keeps SETTLED_EVALUATOR_CPUS for it, not games_cpu_share."""
    cfg = load_config(ROOT / "configs/connect_four.yaml")
    sampling = load_config(ROOT / "configs/connect_four.yaml", ["policy.snapshot_play=sample"])
    greedy_plan, sampling_plan = (plan(c, TWO_CORES)[1] for c in (cfg, sampling))
    assert "1 evaluator(s) 0.05" in greedy_plan.lines()[0] and "1 evaluator(s) 1 " in sampling_plan.lines()[0]
    # without the exact payoffs the evaluator samples again, and the plan gives it its share
    unsettled = plan(load_config(ROOT / "configs/connect_four.yaml", ["evaluator.exact=false"]), TWO_CORES)[1]
    assert "1 evaluator(s) 1 " in unsettled.lines()[0]


def test_replicas_given_leave_the_cores_to_them():
    cfg = load_config(ROOT / "configs/connect_four_ppo.yaml", ["learner.replicas=2"])
    resolved, the_plan = plan(cfg, Resources(cpus=16, gpus=1))
    # a learner of 2 processes takes 8 of the 14.1: no exploiter beside it (16); 12.1 over 2 processes
    assert values(resolved) == (6, 1024, "serve", 2, "auto", 0.33, 0, 0, "serve")
    assert resolved.serve.num_gpus == 0.33
    assert the_plan.decisions[2].key == "learner.replicas" and the_plan.decisions[2].why == "(config)"


def test_many_cores_give_exploiters_then_replicas():
    cfg = load_config(ROOT / "configs/connect_four_ppo.yaml")
    resolved, _ = plan(cfg, Resources(cpus=64))
    # no GPU: opponents in process; 64 - 1.7 = 62.3: all three exploiters (16), 3 replicas of
    # 4 learners (48; 4 would take 64); (62.3 - 12) / 12 processes: 4 workers each
    assert values(resolved) == (4, 1024, "inprocess", 3, "auto", 0.0, 1, 2, "inprocess")


def test_two_main_agents_get_two_of_each_exploiter_at_most():
    cfg = load_config(ROOT / "configs/connect_four_ppo.yaml", ["roles.main_agent.count=2"])
    resolved, _ = plan(cfg, Resources(cpus=1000))
    assert (resolved.roles.main_exploiter.count, resolved.roles.league_exploiter.count) == (2, 4)


def test_gpus_enough_give_each_replica_its_own():
    cfg = load_config(ROOT / "configs/kuhn_selfplay.yaml")
    resolved, the_plan = plan(cfg, Resources(cpus=16, gpus=4))
    # 14.3 CPUs feed 3 replicas, 4 GPUs one each for 4 (each still with its core and a worker's);
    # 4 replicas and the served opponents on 4 GPUs: half a GPU each; (14.3 - 4) / 4: 2 workers of
    # 4096 / 2 = 2048 games
    assert values(resolved) == (2, 2048, "serve", 4, "auto", 0.5, 0, 0, "inprocess")
    assert resolved.serve.num_gpus == 0.5
    assert "one a replica" in the_plan.decisions[2].why


def test_kuhn_on_sixteen_cores_keeps_what_it_gives():
    cfg = load_config(ROOT / "configs/kuhn_poker.yaml")
    resolved, the_plan = plan(cfg, Resources(cpus=16))
    # its 4 learners given; 14.3 CPUs: no second replica (32); (14.3 - 4) / 4: 2 workers of 2048 games
    assert values(resolved) == (2, 2048, "serve", 1, "auto", 0.0, 1, 2, "inprocess")
    assert the_plan.opponents_device == "cpu" and resolved.serve.num_gpus == 0
    given = {d.key for d in the_plan.decisions if d.why == "(config)"}
    assert given == {"roles.main_exploiter.count", "roles.league_exploiter.count", "rollout.opponent_inference",
                     "rollout.policy_inference"}


def test_values_given_are_kept_and_the_config_is_not_changed():
    cfg = load_config(ROOT / "configs/smoke.yaml", ["learner.device=cpu", "serve.num_gpus=0.5"])
    resolved, the_plan = plan(cfg, Resources(cpus=32, gpus=2, nodes=2))
    assert resolved == cfg and resolved is not cfg
    assert all(d.why == "(config)" for d in the_plan.decisions)
    assert (the_plan.opponents_device, the_plan.opponents_num_gpus) == ("cuda", 0.5)
    assert the_plan.decisions[-2].key == "rollout.opponent_inference"
    assert the_plan.decisions[-2].note == "on cuda with serve.num_gpus = 0.5 (config)"
    auto = load_config(ROOT / "configs/connect_four_ppo.yaml")
    plan(auto, Resources(cpus=32, gpus=2))
    assert auto.rollout.workers_per_learner == "auto"  # the given config is left alone


def test_a_learner_that_asks_for_a_gpu_keeps_its_share():
    cfg = load_config(ROOT / "configs/kuhn_selfplay.yaml", ["learner.num_gpus=0.5"])
    resolved, the_plan = plan(cfg, Resources(cpus=4, gpus=1))
    assert resolved.learner.num_gpus == 0.5 and the_plan.value("learner.device") == "cuda"
    assert (the_plan.opponents_device, the_plan.opponents_num_gpus) == ("cuda", 0.5)  # what the learner leaves
    assert resolved.serve.num_gpus == 0.5


def test_served_opponents_on_a_gpu_get_their_share_as_serve_num_gpus():
    cfg = load_config(ROOT / "configs/smoke.yaml", ["learner.device=cpu"])
    resolved, the_plan = plan(cfg, Resources(cpus=32, gpus=2, nodes=2))
    # the learners keep to the CPU: the one opponents replica takes a whole GPU of the two, and
    # nothing else of the config changes
    assert (the_plan.opponents_device, the_plan.opponents_num_gpus) == ("cuda", 1.0)
    assert resolved == load_config(ROOT / "configs/smoke.yaml", ["learner.device=cpu", "serve.num_gpus=1"])
    assert cfg.serve.num_gpus == 0  # the given config is left alone


def test_a_share_the_config_gives_the_opponents_leaves_the_rest_to_the_learners():
    cfg = load_config(ROOT / "configs/kuhn_selfplay.yaml", ["serve.num_gpus=0.5"])
    resolved, the_plan = plan(cfg, Resources(cpus=16, gpus=1))
    # 14.3 CPUs feed 3 replicas, (14.3 - 3) / 3: 3 workers of 4096 // 3 games; the half GPU the
    # opponents replica does not take is split between the 3 replicas
    assert values(resolved) == (3, 1365, "serve", 3, "auto", 0.16, 0, 0, "inprocess")
    assert resolved.serve.num_gpus == 0.5 and the_plan.value("learner.device") == "cuda"
    assert (the_plan.opponents_device, the_plan.opponents_num_gpus) == ("cuda", 0.5)
    # a whole GPU to the opponents leaves the learners none: they train on the CPU
    resolved, the_plan = plan(load_config(ROOT / "configs/kuhn_selfplay.yaml", ["serve.num_gpus=1"]),
                              Resources(cpus=16, gpus=1))
    assert resolved.learner.num_gpus == 0 and resolved.serve.num_gpus == 1
    assert the_plan.value("learner.device") == "cpu"
    assert "leave no GPU to the learners" in the_plan.decisions[3].why


def test_the_plan_prints_a_line_a_decision():
    _, the_plan = plan(load_config(ROOT / "configs/connect_four_ppo.yaml"), TWO_CORES)
    lines = str(the_plan).splitlines()
    assert lines[0].startswith("nash-league: plan for 2 CPUs, no GPU, 1 node: 1.7 CPUs for the coordinator 0.5")
    assert len(lines) == 1 + len(the_plan.decisions) == 9
    assert "  rollout.envs_per_worker = 1024  (config)" in lines
    assert "  rollout.opponent_inference = inprocess in the workers' processes  (auto: no GPU; on CPUs a served " \
           "call costs more than the worker's own pass)" in lines


def test_resources_from_ray():
    resources = Resources.from_ray({"CPU": 48.0, "GPU": 2.0, "memory": 1e11, "object_store_memory": 1e10,
                                    "node:10.0.0.1": 1.0, "node:10.0.0.2": 1.0, "node:__internal_head__": 1.0,
                                    "league_storage": 1.0}, cores=2)
    assert resources == Resources(cpus=48.0, gpus=2.0, nodes=2)  # several nodes: what they declare
    assert str(resources) == "48 CPUs, 2 GPUs, 2 nodes"
    # one node is the launcher's machine: the local Ray the launcher starts declares 4 logical CPUs a
    # core (actors.runtime), planned as the machine's cores; a Ray given fewer keeps its fewer
    one_node = {"CPU": 8.0, "GPU": 1.0, "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0}
    assert Resources.from_ray(one_node, cores=2) == Resources(cpus=2.0, gpus=1.0, nodes=1)
    assert Resources.from_ray(one_node, cores=16) == Resources(cpus=8.0, gpus=1.0, nodes=1)
    assert Resources.from_ray({"CPU": 1e6}).cpus == Resources.local().cpus >= 1 and Resources.local().gpus == 0


def test_a_local_ray_of_logical_cpus_on_two_cores_plans_the_shipped_plan():
    resources = Resources.from_ray({"CPU": 8.0, "node:127.0.0.1": 1.0}, cores=2)
    resolved, _ = plan(load_config(ROOT / "configs/battle.yaml"), resources)
    assert values(resolved) == BEFORE_AUTO["configs/battle.yaml"]


def test_learners_that_take_every_gpu_leave_the_opponents_on_the_cpu():
    cfg = load_config(ROOT / "configs/kuhn_selfplay.yaml", ["learner.num_gpus=1", "learner.replicas=2"])
    resolved, the_plan = plan(cfg, Resources(cpus=16, gpus=1))
    # 2 learner processes ask for a GPU each of the one: none is left, not a negative share
    assert (the_plan.opponents_device, the_plan.opponents_num_gpus) == ("cpu", 0.0)
    assert resolved.serve.num_gpus == 0
