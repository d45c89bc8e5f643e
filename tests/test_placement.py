"""Placement and device logic that needs no Ray: storage paths, per-role options, learner devices."""

import json

import pytest
import torch

from actors.placement import actor_options, coordinator_options, job_working_dir, learner_options, resolve_storage
from league.config import load_config
from policies.device import resolve_device
from policies.net import ActorCritic, PolicySpec
from policies.snapshot import learner_state_to_bytes, policy_to_bytes
from policies.ppo import PPOConfig, make_optimizer


def job_env(working_dir="gcs://_ray_pkg_abc.zip"):
    return {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"runtime_env": {"working_dir": working_dir}, "metadata": {}})}


def test_relative_storage_resolves_against_the_working_directory(tmp_path):
    path, warning = resolve_storage("runs/x", cwd=tmp_path, environ={})
    assert path == str(tmp_path / "runs" / "x") and warning is None


def test_relative_storage_inside_a_job_working_dir_warns_where_it_lives(tmp_path):
    path, warning = resolve_storage("runs/x", cwd=tmp_path, environ=job_env())
    assert path == str(tmp_path / "runs" / "x")
    assert str(tmp_path / "runs" / "x") in warning and "deletes" in warning and "run.storage" in warning


def test_absolute_storage_inside_a_job_does_not_warn(tmp_path):
    assert resolve_storage(str(tmp_path), environ=job_env()) == (str(tmp_path), None)


def test_job_working_dir_reads_the_job_config():
    assert job_working_dir(job_env("gcs://x.zip")) == "gcs://x.zip"
    assert job_working_dir({}) is None
    assert job_working_dir({"RAY_JOB_CONFIG_JSON_ENV_VAR": "not json"}) is None


def test_role_options_from_config():
    cfg = load_config(None, ["rollout.scheduling=spread", "rollout.resources={worker_slot: 1}", "rollout.num_cpus=1",
                             "learner.num_gpus=0.5", "ray.storage_resource=league_storage"])
    assert actor_options(cfg.rollout) == {"num_cpus": 1.0, "num_gpus": 0.0, "resources": {"worker_slot": 1},
                                          "scheduling_strategy": "SPREAD"}
    assert actor_options(cfg.learner) == {"num_cpus": 0.5, "num_gpus": 0.5}
    opts = coordinator_options(cfg)
    assert set(opts) == {"resources"} and set(opts["resources"]) == {"league_storage"}


def test_learner_nice_goes_to_its_runtime_env_only_when_set():
    assert learner_options(load_config(None, []).learner) == {"num_cpus": 0.5, "num_gpus": 0.0}  # Ray's own 15
    opts = learner_options(load_config(None, ["learner.nice=0", "learner.num_cpus=1"]).learner)
    assert opts == {"num_cpus": 1.0, "num_gpus": 0.0, "runtime_env": {"env_vars": {"RAY_worker_niceness": "0"}}}


@pytest.mark.parametrize("requested, gpus, cuda, expected", [
    ("auto", [], True, "cpu"),      # no GPU from Ray: CPU even where CUDA exists
    ("auto", [0], True, "cuda"),
    ("auto", [0], False, "cpu"),    # a GPU resource but a CPU-only torch
    ("cpu", [0], True, "cpu"),
    ("cuda:1", [0, 1], True, "cuda:1"),
])
def test_learner_device_resolution(requested, gpus, cuda, expected):
    assert resolve_device(requested, gpus, cuda_available=cuda) == torch.device(expected)


def test_cuda_learner_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="learner.device=cuda"):
        resolve_device("cuda", [0], cuda_available=False)


def _saved_devices(model, opt):
    import io

    out = set()
    for blob in (policy_to_bytes(model), learner_state_to_bytes(model, opt, {"version": 1})):
        # map_location=None: tensors come back on the device they were saved from
        payload = torch.load(io.BytesIO(blob), map_location=None, weights_only=True)
        out |= {t.device.type for t in payload["state_dict"].values()}
        for state in (payload.get("optimizer") or {}).get("state", {}).values():
            out |= {t.device.type for t in state.values() if isinstance(t, torch.Tensor)}
    return out


def _trained(device):
    from policies.ppo import ppo_update
    from policies.rollout import Rollout
    import numpy as np

    spec = PolicySpec(obs_size=4, num_actions=3, hidden=(8,))
    model = ActorCritic(spec).to(device)
    opt = make_optimizer(model, PPOConfig())
    n = 32
    rng = np.random.default_rng(0)
    rollout = Rollout(obs=rng.normal(size=(n, 4)).astype(np.float32), mask=np.ones((n, 3), dtype=bool),
                      actions=rng.integers(0, 3, n), logp=np.full(n, -np.log(3), dtype=np.float32),
                      values=np.zeros(n, dtype=np.float32), rewards=rng.normal(size=n).astype(np.float32),
                      dones=np.arange(n) % 4 == 3)
    ppo_update(model, opt, rollout, PPOConfig(epochs=1, minibatch_size=16))
    return model, opt


def test_snapshots_and_checkpoints_of_a_cpu_learner_hold_cpu_tensors():
    assert _saved_devices(*_trained("cpu")) == {"cpu"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_snapshots_of_a_gpu_learner_load_on_cpu_workers():
    model, opt = _trained("cuda")
    assert next(model.parameters()).device.type == "cuda"
    assert _saved_devices(model, opt) == {"cpu"}


def test_opponents_replicas_fixed_or_autoscaled_as_serve_reads_them():
    from serve.opponents import Opponents, replica_actor_options, replica_count

    fixed = load_config(None, ["serve.num_replicas=3", "serve.resources={league_worker: 0.01}"])
    d = Opponents.options(ray_actor_options=replica_actor_options(fixed.serve), **replica_count(fixed.serve))
    assert d.num_replicas == 3 and d.ray_actor_options["resources"] == {"league_worker": 0.01}
    scaled = load_config(None, ["serve.autoscaling={min_replicas: 1, max_replicas: 6, target_ongoing_requests: 4}"])
    d = Opponents.options(**replica_count(scaled.serve))
    config = d._deployment_config.autoscaling_config  # Serve's own validated AutoscalingConfig
    assert (config.min_replicas, config.max_replicas, config.target_ongoing_requests) == (1, 6, 4)
