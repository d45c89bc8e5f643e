"""The learners' Adam against torch.optim.Adam, the reference it follows operation for operation."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from policies.optim import Adam


def net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def train(model: nn.Module, optimizer, steps: int, seed: int, lrs=None) -> None:
    g = torch.Generator().manual_seed(seed)
    for t in range(steps):
        if lrs is not None:
            optimizer.param_groups[0]["lr"] = lrs[t]
        x, y = torch.randn(32, 6, generator=g), torch.randn(32, 3, generator=g)
        optimizer.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        nn.utils.clip_grad_norm_(list(model.parameters()), 0.5)
        optimizer.step()


@pytest.mark.parametrize("foreach", [False, True], ids=["per-tensor", "multi-tensor"])
@pytest.mark.parametrize("settings", [dict(lr=3e-3), dict(lr=1e-3, eps=1e-5), dict(lr=2e-3, weight_decay=1e-2),
                                      dict(lr=1e-3, betas=(0.5, 0.9))])
def test_equals_torch_adam_parameter_for_parameter(settings, foreach):
    """Both of torch's paths: per tensor (its default on CPU) and multi-tensor (its default on a GPU)."""
    settings = {**settings, "foreach": foreach}
    ours, ref = net(0), net(0)
    lrs = [settings["lr"] * (1 - t / 60) for t in range(40)]  # a schedule set through param_groups
    train(ours, Adam(ours.parameters(), **settings), 40, seed=1, lrs=lrs)
    train(ref, torch.optim.Adam(ref.parameters(), **settings), 40, seed=1, lrs=lrs)
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a, b)


def test_each_loads_the_others_saved_state_and_goes_on_alike():
    ours, ref = net(0), net(0)
    opt, ref_opt = Adam(ours.parameters(), lr=2e-3, weight_decay=1e-3), torch.optim.Adam(ref.parameters(), lr=2e-3,
                                                                                          weight_decay=1e-3)
    train(ours, opt, 10, seed=2)
    train(ref, ref_opt, 10, seed=2)
    # swap the saved states (as a checkpoint written by either is read by the other) and train on
    into_ref, into_ours = net(5), net(5)
    into_ref.load_state_dict(ours.state_dict())
    into_ours.load_state_dict(ref.state_dict())
    a = torch.optim.Adam(into_ref.parameters(), lr=1.0)
    a.load_state_dict(opt.state_dict())
    b = Adam(into_ours.parameters(), lr=1.0)
    b.load_state_dict(ref_opt.state_dict())
    assert b.param_groups[0]["lr"] == 2e-3 and a.param_groups[0]["lr"] == 2e-3
    train(into_ref, a, 10, seed=3)
    train(into_ours, b, 10, seed=3)
    train(ref, ref_opt, 10, seed=3)
    for x, y, z in zip(into_ref.parameters(), into_ours.parameters(), ref.parameters()):
        assert torch.equal(x, z) and torch.equal(y, z)


def test_a_state_that_does_not_fit_is_refused():
    model = net(0)
    opt = Adam(model.parameters())
    train(model, opt, 2, seed=0)
    saved = opt.state_dict()
    other = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    with pytest.raises(ValueError, match="shape"):
        Adam(other.parameters()).load_state_dict(saved)
    with pytest.raises(ValueError, match="parameters"):
        Adam(list(model.parameters())[:2]).load_state_dict(saved)
    with pytest.raises(ValueError, match="one-group"):
        Adam(model.parameters()).load_state_dict({"state": {}})
    with pytest.raises(ValueError):
        Adam(model.parameters(), lr=-1.0)


def test_training_with_it_does_not_import_torch_dynamo():
    """What it is for: any use of torch.optim imports torch._dynamo, as costly as torch itself."""
    code = ("import sys, torch\n"
            "from torch import nn\n"
            "from policies.optim import Adam\n"
            "m = nn.Linear(4, 2); opt = Adam(m.parameters())\n"
            "opt.zero_grad(); m(torch.randn(8, 4)).sum().backward(); opt.step()\n"
            "opt = Adam(m.parameters(), foreach=True); m(torch.randn(8, 4)).sum().backward(); opt.step()\n"
            "Adam(m.parameters()).load_state_dict(opt.state_dict())\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_state_saved_by_torch_with_settings_and_untrained_parameters_loads_whole():
    """torch's saved betas and eps come back, and a parameter without state yet (no gradient so
    far) starts its moments at its first gradient, as in torch."""
    settings = dict(lr=2e-3, betas=(0.5, 0.9), eps=1e-4, weight_decay=1e-3)
    ref = net(0)
    ref[2].weight.requires_grad_(False)  # the last layer's weight gets no gradient, hence no state
    ref_opt = torch.optim.Adam(ref.parameters(), **settings)
    train(ref, ref_opt, 5, seed=4)
    saved = ref_opt.state_dict()
    assert len(saved["state"]) == 3
    ours = net(9)
    ours.load_state_dict(ref.state_dict())
    opt = Adam(ours.parameters())
    opt.load_state_dict(saved)
    assert {k: opt.param_groups[0][k] for k in settings} == settings
    for model in (ref, ours):
        model[2].weight.requires_grad_(True)
    train(ref, ref_opt, 5, seed=5)
    train(ours, opt, 5, seed=5)
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a, b)


def test_a_learner_checkpoint_written_with_torch_adam_resumes_with_ours():
    """A learner checkpoint saved with torch.optim.Adam (as learners saved them) resumes through
    the learner's own path (``learner_state_from_bytes`` with ``policies.ppo.make_optimizer``)."""
    from league.config import PPOConfig
    from policies.net import ActorCritic, PolicySpec
    from policies.ppo import make_optimizer
    from policies.snapshot import learner_state_from_bytes, learner_state_to_bytes

    cfg = PPOConfig()
    model = ActorCritic(PolicySpec(6, 3, (16,)))
    ref_opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        ref_opt.zero_grad()
        logits, value = model(torch.randn(8, 6, generator=g), torch.ones(8, 3, dtype=torch.bool))
        (logits.pow(2).mean() + value.pow(2).mean()).backward()
        ref_opt.step()
    blob = learner_state_to_bytes(model, ref_opt)
    resumed, opt, _ = learner_state_from_bytes(blob, lambda m: make_optimizer(m, cfg))
    assert isinstance(opt, Adam)
    for p_ref, p in zip(model.parameters(), resumed.parameters()):
        s_ref, s = ref_opt.state[p_ref], opt.state[p]
        assert float(s["step"]) == float(s_ref["step"]) == 3.0
        assert torch.equal(s["exp_avg"], s_ref["exp_avg"]) and torch.equal(s["exp_avg_sq"], s_ref["exp_avg_sq"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_saved_state_moves_to_the_parameters_device_and_trains_there():
    cpu = net(0)
    opt = Adam(cpu.parameters(), lr=1e-3)
    train(cpu, opt, 3, seed=6)
    gpu = net(0).cuda()
    gpu.load_state_dict(cpu.state_dict())
    moved = Adam(gpu.parameters(), lr=1e-3)
    moved.load_state_dict(opt.state_dict())
    for p in gpu.parameters():
        assert moved.state[p]["exp_avg"].device == p.device and moved.state[p]["step"].device.type == "cpu"
    x, y = torch.randn(32, 6, device="cuda"), torch.randn(32, 3, device="cuda")
    moved.zero_grad()
    (gpu(x) - y).pow(2).mean().backward()
    moved.step()
    assert all(moved.state[p]["step"].item() == 4.0 for p in gpu.parameters())
