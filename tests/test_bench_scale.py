"""bench/scale.py without Ray: the model's arithmetic on given unit costs (hand-computed answers),
the fixed cores a config's evaluators take, and the whole bench on a tiny Kuhn league."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench import scale
from league.config import load_config

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# 10 us a worker's env step, 40 us a trained decision, half the env steps the learner's,
# 1 us a reported game of 20 env steps (0.05 us an env step), 1.2 cores of evaluators
UNITS = scale.UnitCosts(worker_cpu_per_step=10e-6, learner_cpu_per_decision=40e-6, decision_share=0.5,
                        coordinator_cpu_per_game=1e-6, steps_per_game=20.0, fixed_cores=1.2)


def test_a_learner_bound_machine():
    got = scale.predict(UNITS, scale.Machine(cores=16, gpus=1, workers=10))
    # learner: 1 / (0.5 * 40 us) = 50,000; workers 10 / 10 us = 1,000,000; coordinator 20 / 1 us;
    # cores: (16 - 1.2) / (10 + 20 + 0.05 us)
    assert got["paces"] == pytest.approx({"learner": 50_000.0, "workers": 1_000_000.0, "coordinator": 20_000_000.0,
                                          "cores": 14.8 / 30.05e-6})
    assert got["bound"] == "learner" and got["env_steps_per_s"] == pytest.approx(50_000.0)
    # at that pace the learner uses its one core, the workers half a core
    assert got["cores_used"] == pytest.approx({"workers": 0.5, "learner": 1.0, "coordinator": 0.0025,
                                               "evaluator": 1.2})
    # two replicas double the learner's term; a GPU's speed-up multiplies it, and only with a GPU
    assert scale.predict(UNITS, scale.Machine(cores=16, workers=10, replicas=2))["env_steps_per_s"] == \
        pytest.approx(100_000.0)
    fast = scale.predict(UNITS, scale.Machine(cores=16, gpus=1, workers=10, learner_speedup=4.0))
    assert fast["paces"]["learner"] == pytest.approx(200_000.0) and fast["learner_speedup"] == 4.0
    assert fast["paces"]["cores"] == pytest.approx(14.8 / 15.05e-6)  # the learner's CPU a decision / 4
    no_gpu = scale.predict(UNITS, scale.Machine(cores=16, gpus=0, workers=10, learner_speedup=4.0))
    assert no_gpu["paces"]["learner"] == pytest.approx(50_000.0) and no_gpu["learner_speedup"] == 1.0


def test_a_worker_bound_machine():
    units = scale.UnitCosts(worker_cpu_per_step=20e-6, learner_cpu_per_decision=10e-6, decision_share=0.5,
                            coordinator_cpu_per_game=1e-6, steps_per_game=20.0, fixed_cores=1.2)
    got = scale.predict(units, scale.Machine(cores=16, workers=1))
    # one worker: 1 / 20 us = 50,000; learner 1 / 5 us = 200,000
    assert got["bound"] == "workers" and got["env_steps_per_s"] == pytest.approx(50_000.0)
    assert got["paces"]["learner"] == pytest.approx(200_000.0)
    # two nodes of 16 cores and 40 workers: 2,000,000 for the workers; the cores (32 - 1.2) / 25.05 us bind
    wide = scale.predict(units, scale.Machine(cores=16, nodes=2, workers=40, replicas=16))
    assert wide["bound"] == "cores" and wide["cores"] == 32
    assert wide["env_steps_per_s"] == pytest.approx(30.8 / 25.05e-6)


def test_a_full_machine_and_one_whose_evaluators_take_every_core():
    got = scale.predict(UNITS, scale.Machine(cores=2, workers=4))
    # (2 - 1.2) / 30.05 us = 26,622; workers 400,000, learner 50,000
    assert got["bound"] == "cores" and got["env_steps_per_s"] == pytest.approx(0.8 / 30.05e-6)
    assert sum(got["cores_used"].values()) == pytest.approx(2.0)
    none = scale.predict(UNITS, scale.Machine(cores=1, workers=4))
    assert none["bound"] == "evaluator" and none["env_steps_per_s"] == 0.0


def test_fixed_cores_are_the_configured_shares():
    # Connect Four: one sampling evaluator (games_cpu_share 1) and the anchor judge (0.2)
    assert scale.fixed_cores(load_config(str(ROOT / "configs" / "connect_four_ppo.yaml"))) == pytest.approx(1.2)
    # Kuhn, exact: the measuring evaluator's 0.1, the judge's default 0.5, the prober's default 0.5
    assert scale.fixed_cores(load_config(str(ROOT / "configs" / "smoke.yaml"))) == pytest.approx(1.1)
    no_bound = load_config(str(ROOT / "configs" / "connect_four_ppo.yaml"), ["evaluator.anchor_num_cpus=0",
                                                                              "evaluator.count=2"])
    assert scale.fixed_cores(no_bound) == pytest.approx(3.0)  # an unbounded judge takes a core
    # greedy snapshots: the evaluator plays each pair's two games once (0.05) beside the judge's 0.2
    assert scale.fixed_cores(load_config(str(ROOT / "configs" / "connect_four.yaml"))) == pytest.approx(0.25)


def test_the_bench_on_a_tiny_kuhn_league(capsys):
    argv = ["--config", str(ROOT / "configs" / "smoke.yaml"), "--set", "league.pool_max_size=4",
            "--seconds", "0.3", "--updates", "1", "--cores", "2", "--workers", "2"]
    assert scale.main(argv) == 0
    out = capsys.readouterr().out
    assert "bound by the" in out
    line = json.loads(out.strip().splitlines()[-1])
    units = line["units"]
    assert all(units[k] > 0 for k in units)
    # Kuhn's two players alternate and the learner's seat is drawn: about half the env steps are its
    assert units["decision_share"] == pytest.approx(0.5, abs=0.05)
    assert 2.0 <= units["steps_per_game"] <= 3.0  # a Kuhn game is two or three decisions
    assert line["machine"] == {"cores": 2.0, "gpus": 0, "nodes": 1, "workers": 2, "learners": 3, "replicas": 1,
                               "learner_speedup": 1.0}
    # the printed prediction is the model's on the printed unit costs
    again = scale.predict(scale.UnitCosts(**units), scale.Machine(**line["machine"]))
    assert line["prediction"]["bound"] == again["bound"]
    assert line["prediction"]["env_steps_per_s"] == pytest.approx(again["env_steps_per_s"], rel=1e-3)


def test_bad_options_are_one_line(capsys):
    assert scale.main(["--set", "ppo.epochs=0", "--seconds", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nash-league: bench.scale:") and "ppo.epochs" in err and "\n" not in err
    if not torch.cuda.is_available():
        assert scale.main(["--device", "cuda"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        scale.main(["--cores", "0"])


def test_the_gpu_check_reads_the_launchers_progress_lines_after_the_warm_up():
    from bench import gpu_check

    text = "\n".join([
        "nash-league: plan for 16 CPUs, 1 GPU, 1 node: 1.7 CPUs for the coordinator 0.5 leave 14.3",
        "  learner.replicas = 2  (auto: 2 process(es) of each of 1 learner(s) fit)",
        "  rollout.workers_per_learner = 5  (auto)",
        "2026-11-28 12:00:00 actors.league_run INFO started",
        "[      5s]         0 env steps/s | games 0 | pool 1",
        "[     55s]     50000 env steps/s | games 10",
        "[     60s]     70000 env steps/s | games 20",
        "[     65s]     90000 env steps/s | games 30",
        "[     70s]     80000 env steps/s | games 40",
        "[    180s]         0 env steps/s | games 50",  # the line at the stop
    ])
    got = gpu_check.progress_rates(text)
    assert got["env_steps_per_s_median"] == 80000 and got["env_steps_per_s_max"] == 90000
    assert got["progress_lines"] == 3
    assert got["plan"] == text.splitlines()[:3]
    assert gpu_check.last_json('x\n{"a": 1}\nnot json\n') == {"a": 1}


def test_the_gpu_check_takes_named_leagues_and_keeps_the_actors_error_lines(tmp_path):
    import argparse

    from bench import gpu_check

    assert gpu_check.parse_league("served=rollout.policy_inference=serve,serve.num_replicas=2") == (
        "served", ["rollout.policy_inference=serve", "serve.num_replicas=2"])
    assert gpu_check.parse_league("auto=") == ("auto", [])
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=KEY=VALUE"):
        gpu_check.parse_league("a b=x=1")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker-1.err").write_text("INFO fine\nERROR worker:main_agent-0-w0: the learner's served policy raised "
                                        "UnansweredEvaluation: gone\nmore\n")
    (logs / "worker-2.out").write_text("Traceback (most recent call last):\n")
    (logs / "raylet.err").write_text("ERROR not an actor's\n")
    assert gpu_check.worker_errors(tmp_path / "w.txt", logs=logs) == 2
    kept = (tmp_path / "w.txt").read_text().splitlines()
    assert kept == ["worker-1.err: ERROR worker:main_agent-0-w0: the learner's served policy raised "
                    "UnansweredEvaluation: gone", "worker-2.out: Traceback (most recent call last):"]
