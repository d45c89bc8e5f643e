"""The frozen opponents' forward passes on the device of their networks (policies.net,
policies.snapshot, serve.opponents): an opponents replica given a GPU (``serve.num_gpus``) loads
its snapshots onto it and evaluates them there, and its results come back as CPU numpy.

The device-agnostic code is tested on the CPU; the same tests run on CUDA where torch sees it,
comparing its probabilities with the CPU's to 1e-5 for the stacked and the single passes."""

import numpy as np
import pytest
import torch
from torch import nn

from league.config import ConfigError, load_config
from policies.net import (PolicySpec, STACK_MAX_WEIGHTS, _as_tensor, build_policy, mlp_weights, model_device,
                          stacked_probs)
from policies.snapshot import SnapshotCache, policy_to_bytes
from serve.batching import act_known

CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="needs a CUDA device: the opponents' forward passes on a GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]

SMALL = PolicySpec(obs_size=11, num_actions=4, hidden=(16, 16))  # stacked: layers batched, batches padded
WIDE = PolicySpec(obs_size=42, num_actions=7, hidden=(256, 256))  # one lean pass each over one batch
CONV = PolicySpec(obs_size=42, num_actions=7, net="conv", obs_shape=(6, 7), channels=8, blocks=1)  # one pass each


def _models(spec: PolicySpec, n: int) -> list:
    torch.manual_seed(7)
    return [build_policy(spec).eval() for _ in range(n)]


def _batches(spec: PolicySpec, sizes: list[int], seed: int = 3):
    rng = np.random.default_rng(seed)
    obs = [rng.standard_normal((n, spec.obs_size)).astype(np.float32) for n in sizes]
    masks = []
    for n in sizes:
        m = rng.random((n, spec.num_actions)) < 0.6
        m[np.arange(n), rng.integers(0, spec.num_actions, n)] = True  # every row a legal action
        masks.append(m)
    return obs, masks


def _reference(model, obs, mask) -> np.ndarray:
    """The network's own forward pass on the CPU, softmaxed: what every path must give."""
    with torch.no_grad():
        logits, _ = model.cpu()(torch.as_tensor(obs), torch.as_tensor(mask))
    return torch.softmax(logits, dim=-1).numpy()


def _on(models, device):
    return [m.to(device) for m in models]


def test_the_specs_take_the_paths_they_are_named_for():
    assert mlp_weights(SMALL) <= STACK_MAX_WEIGHTS < mlp_weights(WIDE)


def test_model_device_is_where_the_parameters_are():
    assert model_device(build_policy(SMALL)) == torch.device("cpu")
    buffers_only = nn.Module()
    buffers_only.register_buffer("b", torch.zeros(1))
    assert model_device(buffers_only) == torch.device("cpu")
    assert model_device(nn.Module()) == torch.device("cpu")  # neither: the CPU


def test_as_tensor_on_the_cpu_copies_nothing():
    x = torch.zeros((2, 3))
    assert _as_tensor(x, torch.float32) is x and _as_tensor(x, torch.float32, torch.device("cpu")) is x
    a = np.zeros((2, 3), dtype=np.float32)
    t = _as_tensor(a, torch.float32, torch.device("cpu"))
    assert t.device.type == "cpu" and np.shares_memory(t.numpy(), a)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec,sizes", [(SMALL, [5, 7, 30, 1, 6]), (WIDE, [5, 40, 2]), (CONV, [3, 9])],
                         ids=["stacked", "one-pass-each", "conv"])
def test_stacked_probs_on_the_models_device_equal_the_cpu_forward(device, spec, sizes):
    models = _models(spec, len(sizes))
    obs, masks = _batches(spec, sizes)
    want = [_reference(m, o, k) for m, o, k in zip(models, obs, masks)]
    got = stacked_probs(_on(models, device), obs, masks)
    assert [type(p) for p in got] == [np.ndarray] * len(sizes)
    for g, w, k in zip(got, want, masks):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)
        assert np.all(g[~k] == 0)  # illegal actions exactly 0 on any device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", [SMALL, WIDE, CONV], ids=["small", "wide", "conv"])
def test_single_passes_on_the_models_device_equal_the_cpu_forward(device, spec):
    cpu = _models(spec, 1)[0]
    obs, masks = _batches(spec, [33])
    want = _reference(cpu, obs[0], masks[0])
    with torch.no_grad():
        want_value = cpu(torch.as_tensor(obs[0]), torch.as_tensor(masks[0]))[1].numpy()
    model = cpu.to(device)
    np.testing.assert_allclose(model.probs(obs[0], masks[0]), want, atol=1e-5, rtol=0)
    actions, logp, value = model.act(obs[0], masks[0], deterministic=True)
    assert actions.dtype == np.int64 and logp.dtype == np.float32 and value.dtype == np.float32
    np.testing.assert_allclose(np.exp(logp), want[np.arange(len(want)), actions], atol=1e-5, rtol=0)
    assert np.all(want[np.arange(len(want)), actions] >= want.max(axis=1) - 1e-5)
    np.testing.assert_allclose(value, want_value, atol=1e-4, rtol=1e-5)
    # sampled with a numpy generator, a torch generator of the CPU, and torch's own: always legal
    for generator in (np.random.default_rng(0), torch.Generator().manual_seed(0), None):
        actions, _, _ = model.act(obs[0], masks[0], generator=generator)
        assert masks[0][np.arange(len(actions)), actions].all()
    # tensors already on the device are taken as they are
    t_obs, t_mask = torch.as_tensor(obs[0], device=device), torch.as_tensor(masks[0], device=device)
    np.testing.assert_allclose(model.probs(t_obs, t_mask), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_a_snapshot_cache_loads_onto_its_device_and_its_agents_act_there(device):
    models = _models(SMALL, 3)
    blobs = {f"a{i}": policy_to_bytes(m) for i, m in enumerate(models)}
    cache = SnapshotCache(4, lambda a: blobs[a], device=device)
    loaded = {a: cache.get(a) for a in blobs}
    assert {model_device(m).type for m in loaded.values()} == {device}
    ids = ["a0", "a1", "gone", "a2"]
    obs, masks = _batches(SMALL, [4, 9, 3, 1])
    actions = act_known(loaded, ids, obs, masks, np.random.default_rng(0))
    for a, k in zip(actions, masks):
        assert a.dtype == np.int64 and k[np.arange(len(a)), a].all()
    # the cache counts the same weight bytes wherever they are
    on_cpu = SnapshotCache(4, lambda a: blobs[a])
    for a in blobs:
        on_cpu.get(a)
    assert cache.bytes == on_cpu.bytes > 0


def test_a_snapshot_cache_without_a_device_keeps_the_cpu():
    blob = policy_to_bytes(_models(SMALL, 1)[0])
    assert model_device(SnapshotCache(1, lambda a: blob).get("x")).type == "cpu"
    assert model_device(SnapshotCache(1, lambda a: blob, device="cpu").get("x")).type == "cpu"


def test_serve_num_gpus_becomes_the_replicas_gpu_request():
    from serve.opponents import replica_actor_options

    assert load_config(None).serve.num_gpus == 0
    assert "num_gpus" not in replica_actor_options(load_config(None).serve)
    options = replica_actor_options(load_config(None, ["serve.num_gpus=0.25"]).serve)
    assert options == {"num_cpus": 0.2, "num_gpus": 0.25}
    with pytest.raises(ConfigError, match="serve.num_gpus"):
        load_config(None, ["serve.num_gpus=-1"])
