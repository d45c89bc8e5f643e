"""policies.net's networks (mlp, conv, a user's factory), their snapshots, the games' observation
shapes, bad network specs, and the export of a Nash mixture to ONNX / TorchScript."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from envs import game_info, make_game
from league.config import ConfigError, load_config
from policies.net import (ILLEGAL_LOGIT, STACK_MAX_WEIGHTS, ActorCritic, ConvActorCritic, FactoryNet, PolicyNetError,
                          PolicySpec, build_policy, stacked_act, stacked_probs)
from policies.snapshot import (POLICY_FORMAT, VERSION, learner_state_from_bytes, learner_state_to_bytes,
                               policy_from_bytes, policy_to_bytes)

ROOT = Path(__file__).resolve().parents[1]
CUSTOM = "examples.nets.layernorm_mlp:build"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def decisions(game_name: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` real (observation, legal mask) pairs of the mover, from random play."""
    game = make_game(game_name, 64, seed=seed)
    rng = np.random.default_rng(seed)
    obs, masks = [], []
    while sum(len(o) for o in obs) < n:
        movers = game.movers()
        actions = np.full((game.num_envs, 2), -1, dtype=np.int64)
        for seat in (0, 1):
            envs = np.flatnonzero(movers[:, seat])
            if not len(envs):
                continue
            o, m = game.observe(seat, envs)
            obs.append(o)
            masks.append(m)
            for row, e in enumerate(envs):
                actions[e, seat] = rng.choice(np.flatnonzero(m[row]))
        game.step(actions)
    return np.concatenate(obs)[:n], np.concatenate(masks)[:n]


def spec_for(game_name: str, net: str, **kw) -> PolicySpec:
    info = game_info(game_name)
    return PolicySpec(info.obs_size, info.num_actions, net=net, obs_shape=info.obs_shape,
                      channels_last=info.channels_last, **kw)


def sharpen(model: torch.nn.Module, scale: float = 10.0) -> torch.nn.Module:
    """Large weights everywhere (logits of order 1e3-1e5 through a few layers, still far above
    ILLEGAL_LOGIT): unmasked, an illegal action would often win outright."""
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


NETS = [("mlp", {"hidden": (32, 32)}), ("conv", {"channels": 8, "blocks": 2}), (CUSTOM, {"args": {"width": 16}})]


# ------------------------------------------------------------ observation shapes
def test_connect_four_observation_is_three_channel_first_planes():
    """OpenSpiel's Connect Four tensor is (player 0's discs, player 1's discs, empty) x 6 rows (bottom
    first) x 7 columns in C order: the empty board is 42 ones in the last plane; after seat 0 plays
    column 3, one cell moves from that plane to the first, at row 0, column 3."""
    game = make_game("connect_four", 1, seed=0)
    assert game.obs_shape == (3, 6, 7) and not game.channels_last
    planes = game.observe(0)[0].reshape(3, 6, 7)
    assert planes[2].sum() == 42 and planes[:2].sum() == 0
    game.step(np.array([[3, -1]]))
    planes = game.observe(1)[0].reshape(3, 6, 7)
    assert planes[2].sum() == 41 and planes[1].sum() == 0
    assert np.argwhere(planes[0]).tolist() == [[0, 3]]


def test_pettingzoo_connect_four_is_channels_last_and_the_conv_net_reads_it_as_planes():
    """connect_four_v3 observes (6 rows, 7 columns, [own, opponent]) in C order; the conv net's planes
    are (2, 6, 7), and the opponent's first disc lands in plane 1, bottom row (5), its column."""
    pytest.importorskip("pettingzoo")
    name = "pettingzoo:connect_four_v3"
    game = make_game(name, 1, seed=0)
    assert game.obs_shape == (6, 7, 2) and game.channels_last and game.obs_size == 84
    game.step(np.array([[4, -1]]))
    obs, _ = game.observe(1)
    net = build_policy(spec_for(name, "conv"))
    planes = net.planes_of(torch.as_tensor(obs))
    assert planes.shape == (1, 2, 6, 7)
    assert planes[0, 1].sum() == 1 and planes[0, 1, 5, 4] == 1 and planes[0, 0].sum() == 0


def test_flat_games_keep_a_flat_shape():
    for name in ("kuhn_poker", "rps", "leduc_poker"):
        info = game_info(name)
        assert info.obs_shape == (info.obs_size,) and make_game(name, 1).obs_shape == info.obs_shape


# ------------------------------------------------------------ masked probabilities
@pytest.mark.parametrize("net, kw", NETS)
def test_every_net_gives_exactly_zero_probability_to_illegal_actions(net, kw):
    obs, mask = decisions("connect_four", 512)
    mask[::3, :4] = False  # some rows with few legal actions
    mask[np.arange(len(mask)), 6] |= ~mask.any(axis=1)
    model = sharpen(build_policy(spec_for("connect_four", net, **kw)))
    probs = model.probs(obs, mask)
    assert np.all(probs[~mask] == 0.0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    logits, value = model(torch.as_tensor(obs), torch.as_tensor(mask))
    assert torch.all(logits[torch.as_tensor(~mask)] == ILLEGAL_LOGIT) and value.shape == (len(obs),)
    actions, logp, _ = model.act(obs, mask, generator=np.random.default_rng(0))
    assert mask[np.arange(len(obs)), actions].all() and np.isfinite(logp).all()


def test_a_user_module_that_ignores_the_mask_is_masked_by_the_wrapper():
    model = build_policy(spec_for("kuhn_poker", CUSTOM, args={"width": 8}))
    assert isinstance(model, FactoryNet) and type(model.body).__name__ == "LayerNormMLP"
    obs, mask = decisions("kuhn_poker", 64)
    raw_logits, _ = model.body(torch.as_tensor(obs), torch.as_tensor(mask))
    assert torch.all(raw_logits > ILLEGAL_LOGIT)  # the module's own logits are unmasked
    assert np.all(model.probs(obs, mask)[~mask] == 0.0)


@pytest.mark.parametrize("net, kw", NETS)
def test_evaluate_actions_agrees_with_probs(net, kw):
    """The PPO loss inputs come from the same forward: log pi(a|s) == log probs[a], entropy == -sum p log p."""
    obs, mask = decisions("connect_four", 64, seed=1)
    model = build_policy(spec_for("connect_four", net, **kw))
    probs = model.probs(obs, mask)
    actions = torch.as_tensor(np.where(mask, probs, -1).argmax(axis=1))
    logp, entropy, value = model.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(mask), actions)
    np.testing.assert_allclose(logp.detach().numpy(), np.log(probs[np.arange(64), actions.numpy()]), atol=1e-5)
    p = probs.astype(np.float64)
    np.testing.assert_allclose(entropy.detach().numpy(), -(p * np.log(np.where(p > 0, p, 1))).sum(1), atol=1e-5)
    assert value.shape == (64,)


def test_stacked_inference_falls_back_to_each_nets_own_forward():
    """Conv and user nets are not stacked into batched matmuls; stacked_probs still gives each net's own
    probabilities on its own batch, and stacked_act only legal actions."""
    obs, mask = decisions("connect_four", 300, seed=2)
    torch.manual_seed(0)
    models = [build_policy(spec_for("connect_four", n, **kw)) for n, kw in NETS] + \
             [build_policy(spec_for("connect_four", "conv", channels=8))]
    batches = [slice(0, 100), slice(100, 130), slice(130, 250), slice(250, 300)]
    got = stacked_probs(models, [obs[b] for b in batches], [mask[b] for b in batches])
    for m, b, p in zip(models, batches, got):
        np.testing.assert_array_equal(p, m.probs(obs[b], mask[b]))
    acts = stacked_act(models, [obs[b] for b in batches], [mask[b] for b in batches], np.random.default_rng(0))
    for b, a in zip(batches, acts):
        assert mask[b][np.arange(len(a)), a].all()


def test_a_residual_conv_tower_of_the_configured_size():
    spec = spec_for("connect_four", "conv", channels=16, blocks=3)
    net = build_policy(spec)
    assert isinstance(net, ConvActorCritic) and len(net.tower) == 3
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [tuple(c.weight.shape) for c in convs[:2]] == [(16, 3, 3, 3), (16, 16, 3, 3)]
    assert len(convs) == 1 + 2 * 3 + 2  # stem, two per block, the two heads' 1x1


def test_reset_parameters_gives_a_fresh_network():
    for net, kw in NETS:
        model = build_policy(spec_for("connect_four", net, **kw))
        before = [p.detach().clone() for p in model.parameters()]
        model.reset_parameters()
        changed = [not torch.equal(a, b) for a, b in zip(before, model.parameters()) if a.dim() > 1]
        assert all(changed), net


# ------------------------------------------------------------ snapshots
@pytest.mark.parametrize("net, kw", NETS)
def test_snapshot_round_trip_rebuilds_the_same_network_from_data(net, kw):
    model = build_policy(spec_for("connect_four", net, **kw))
    obs, mask = decisions("connect_four", 256, seed=3)
    blob = policy_to_bytes(model)
    payload = torch.load(io.BytesIO(blob), weights_only=True)  # plain data: no pickled code
    assert payload["spec"]["net"] == net and payload["spec"]["obs_shape"] == [3, 6, 7]
    back = policy_from_bytes(blob)
    assert type(back) is type(model) and back.spec == model.spec
    np.testing.assert_array_equal(back.probs(obs, mask), model.probs(obs, mask))
    opt = torch.optim.Adam(model.parameters())
    again, _, extra = learner_state_from_bytes(learner_state_to_bytes(model, opt, {"version": 3}))
    np.testing.assert_array_equal(again.probs(obs, mask), model.probs(obs, mask))
    assert extra == {"version": 3}


def test_a_blob_without_a_net_field_loads_as_the_mlp_it_was():
    """The blob policy_to_bytes wrote before networks had a kind: spec = obs_size, num_actions,
    hidden, activation."""
    torch.manual_seed(0)
    old = ActorCritic(PolicySpec(11, 2, (16, 8), "relu"))
    buf = io.BytesIO()
    torch.save({"format": POLICY_FORMAT, "version": VERSION,
                "spec": {"obs_size": 11, "num_actions": 2, "hidden": [16, 8], "activation": "relu"},
                "state_dict": old.state_dict()}, buf)
    back = policy_from_bytes(buf.getvalue())
    assert type(back) is ActorCritic and back.spec.net == "mlp" and back.spec.obs_shape == (11,)
    obs, mask = decisions("kuhn_poker", 100)
    np.testing.assert_array_equal(back.probs(obs, mask), old.probs(obs, mask))


def test_a_blob_naming_a_module_this_process_cannot_import_is_refused():
    model = build_policy(spec_for("kuhn_poker", CUSTOM))
    payload = torch.load(io.BytesIO(policy_to_bytes(model)), weights_only=True)
    payload["spec"]["net"] = "no_such_package.nets:build"
    buf = io.BytesIO()
    torch.save(payload, buf)
    with pytest.raises(ValueError, match="cannot import 'no_such_package.nets'"):
        policy_from_bytes(buf.getvalue())


# ------------------------------------------------------------ bad specs
class NotAModule:
    pass


def wrong_logits(spec):
    return torch.nn.Linear(spec.obs_size, spec.num_actions + 1)


def returns_object(spec):
    return NotAModule()


@pytest.mark.parametrize("net, kw, key, text", [
    ("conv", {}, "policy.net", "conv needs a game with a 2-D or 3-D observation shape"),
    ("no_such_package.nets:build", {}, "policy.net", "cannot import"),
    ("examples.nets.layernorm_mlp:missing", {}, "policy.net", "has no callable 'missing'"),
    (f"{__name__}:returns_object", {}, "policy.net", "not a torch.nn.Module"),
    (f"{__name__}:wrong_logits", {}, "policy.net", "forward(obs, mask) must return (logits, values)"),
    (CUSTOM, {"args": {"widht": 8}}, "policy.args", "does not take"),
    (CUSTOM, {"args": {"width": 0}}, "policy.args", "width and depth must be >= 1"),
    ("conv_net", {}, "policy.net", "must be mlp, conv or 'package.module:factory'"),
])
def test_bad_network_specs_raise_naming_the_key(net, kw, key, text):
    with pytest.raises(PolicyNetError) as err:
        build_policy(spec_for("kuhn_poker", net, **kw))
    assert err.value.key == key and text in str(err.value)


@pytest.mark.parametrize("overrides, key, text", [
    (["policy.net=conv"], "policy.net", "conv needs a game with a 2-D or 3-D observation shape"),
    (["policy.net=no_such_package.nets:build"], "policy.net", "cannot import 'no_such_package.nets'"),
    (["policy.net=':build'"], "policy.net", "must be mlp, conv or 'package.module:factory'"),
    ([f"policy.net={CUSTOM}", "policy.args={widht: 8}"], "policy.args", "does not take"),
    (["policy.channels=0"], "policy.channels", "must be > 0"),
])
def test_the_launcher_stops_on_a_bad_network_with_one_line_naming_the_key(overrides, key, text):
    """configs/smoke.yaml is Kuhn poker: flat observations."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "actors.launch", "--config", "configs/smoke.yaml", *overrides],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith(f"nash-league: config: {key}: ") and text in lines[0], lines[0]
    assert "Started a local Ray" not in out.stdout + out.stderr


def test_the_launcher_accepts_a_users_factory_on_its_path():
    from actors.launch import load

    cfg, info = load(["--config", str(ROOT / "configs/smoke.yaml"), f"policy.net={CUSTOM}", "policy.args={width: 8}"])
    assert cfg.policy.net == CUSTOM and cfg.policy.args == {"width": 8} and info.obs_shape == (11,)


def test_config_defaults_are_the_mlp_every_existing_config_had():
    cfg = load_config(ROOT / "configs/connect_four_ppo.yaml")
    assert (cfg.policy.net, cfg.policy.hidden, cfg.policy.activation) == ("mlp", [256, 256], "tanh")
    cfg = load_config(ROOT / "configs/connect_four.yaml")  # the search learner's network: ReLU
    assert (cfg.policy.net, cfg.policy.hidden, cfg.policy.activation) == ("mlp", [256, 256], "relu")
    with pytest.raises(ConfigError, match="policy.blocks"):
        load_config(ROOT / "configs/connect_four.yaml", ["policy.blocks=-1"])


# ------------------------------------------------------------ export
def export_equivalence(model, tmp_path, fmt="onnx", n=1000):
    from serve.export import export_onnx, export_torchscript

    game = "connect_four" if model.spec.obs_size == 126 else "kuhn_poker"
    obs, mask = decisions(game, n, seed=5)
    want = model.probs(obs, mask)
    if fmt == "onnx":
        import onnxruntime as ort

        path = export_onnx(model, tmp_path / "m.onnx")
        got = ort.InferenceSession(str(path)).run(None, {"obs": obs, "mask": mask})[0]
    else:
        path = export_torchscript(model, tmp_path / "m.pt")
        got = torch.jit.load(str(path))(torch.as_tensor(obs), torch.as_tensor(mask)).detach().numpy()
    assert got.shape == (n, model.spec.num_actions)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert np.all(got[~mask] == 0.0)


@pytest.mark.parametrize("net, kw", NETS)
def test_onnx_members_give_the_torch_models_probabilities(net, kw, tmp_path):
    torch.manual_seed(1)
    export_equivalence(build_policy(spec_for("connect_four", net, **kw)), tmp_path)


def test_a_greedy_snapshot_exports_as_the_move_it_plays(tmp_path):
    """An exported greedy snapshot (``policy.snapshot_play: greedy``) puts probability 1 on the
    network's most probable legal move, as the league played it."""
    from policies.snapshot import policy_from_bytes, policy_to_bytes

    torch.manual_seed(1)
    greedy = policy_from_bytes(policy_to_bytes(build_policy(spec_for("connect_four", "mlp")), "greedy"))
    export_equivalence(greedy, tmp_path)


def test_torchscript_members_give_the_torch_models_probabilities(tmp_path):
    torch.manual_seed(1)
    export_equivalence(build_policy(spec_for("connect_four", "conv", channels=8)), tmp_path, fmt="torchscript")


def league_store(tmp_path, models, weights, game="kuhn_poker"):
    """A run folder as the coordinator writes it: agents with snapshot blobs, the game, a published Nash."""
    from league.pool import AgentRecord, AgentType
    from league.store import LeagueStore

    with LeagueStore(tmp_path) as store:
        store.set_meta("game", game)
        store.set_meta("game_params", {})
        ids = []
        for i, m in enumerate(models):
            ids.append(f"main_agent-0:{i}")
            store.add_agent(AgentRecord(agent_id=ids[-1], version=i, agent_type=AgentType.MAIN_AGENT), policy_to_bytes(m))
        store.save_nash(1.0, len(models), ids, list(weights), 0.5, 0.0, 0.01, "lp")
    return ids


BLOCKER = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'ray', 'policies', 'league', 'envs', 'actors', 'serve'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Blocked())
"""


def run_exported_player(folder: Path) -> dict:
    """examples/nets/play_exported.py in a Python where torch, Ray and the project cannot be imported."""
    code = BLOCKER + (ROOT / "examples/nets/play_exported.py").read_text()
    out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=300,
                         cwd="/", env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_export_cli_writes_the_published_mixture_and_it_plays_without_torch(tmp_path):
    """Kuhn poker, two members 0.25 / 0.75 (and one of weight 0, left out): policy.json names them
    with their weights, each graph equals its snapshot, and the documented player runs with
    torch and Ray blocked."""
    import onnxruntime as ort

    torch.manual_seed(2)
    models = [build_policy(spec_for("kuhn_poker", "mlp", hidden=(16,))),
              build_policy(spec_for("kuhn_poker", CUSTOM, args={"width": 8}))]
    ids = league_store(tmp_path / "run", models + [models[0]], [0.25, 0.75, 0.0])
    out = subprocess.run([sys.executable, "-m", "serve.export", "--storage", str(tmp_path / "run"),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["members"] == {ids[0]: 0.25, ids[1]: 0.75}
    # the graphs hold their weights (no member-NN.onnx.data beside them), and the exporter's
    # "torchvision is not installed" notes are not printed
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["member-00.onnx", "member-01.onnx", "policy.json"]
    assert "torchvision" not in out.stderr, out.stderr
    meta = json.loads((tmp_path / "out/policy.json").read_text())
    assert meta["game"] == "kuhn_poker" and meta["observation"] == "information_state_tensor"
    assert (meta["obs_size"], meta["obs_shape"], meta["num_actions"]) == (11, [11], 2)
    assert [(m["agent_id"], m["weight"], m["net"]) for m in meta["members"]] == [
        (ids[0], 0.25, "mlp"), (ids[1], 0.75, CUSTOM)]
    obs, mask = decisions("kuhn_poker", 1000, seed=6)
    for m, model in zip(meta["members"], models):
        got = ort.InferenceSession(str(tmp_path / "out" / m["file"])).run(None, {"obs": obs, "mask": mask})[0]
        np.testing.assert_allclose(got, model.probs(obs, mask), atol=1e-5, rtol=0)
    played = run_exported_player(tmp_path / "out")
    assert played["episodes"] == 100 and -2.0 <= played["mean_return_seat0"] <= 2.0

    # the exploitability tool rebuilds the user's network in its own process from the stored data
    from evaluation.exploitability import nash_conv_of_policy

    done = subprocess.run([sys.executable, "-m", "evaluation.exploitability", "--storage", str(tmp_path / "run"),
                           "--agent", ids[1]], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-2000:]
    here = nash_conv_of_policy("kuhn_poker", models[1])["nash_conv"]
    assert json.loads(done.stdout)["nash_conv"] == pytest.approx(here, abs=1e-9) and here > 0


def test_the_documented_player_is_the_file_the_test_runs():
    doc = (ROOT / "docs/export.md").read_text()
    assert (ROOT / "examples/nets/play_exported.py").read_text().strip() in doc


def test_the_export_cli_says_in_one_line_when_there_is_nothing_to_export(tmp_path):
    from league.store import LeagueStore

    LeagueStore(tmp_path / "run").close()
    out = subprocess.run([sys.executable, "-m", "serve.export", "--storage", str(tmp_path / "run"),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"nash-league: --storage: the league in {tmp_path / 'run'} has no published Nash mixture yet"]


def test_a_seed_snapshot_naming_a_factory_the_config_does_not_is_refused_before_ray(tmp_path):
    """Loading a snapshot imports the factory its spec names: a file from elsewhere may name only
    the shipped networks or the configured factory."""
    from actors.launch import load

    path = tmp_path / "seed.pt"
    path.write_bytes(policy_to_bytes(build_policy(spec_for("kuhn_poker", CUSTOM))))
    args = ["--config", str(ROOT / "configs/smoke.yaml"), f"league.seed_snapshots=[{path}]"]
    with pytest.raises(ConfigError, match=r"league.seed_snapshots\[0\]: .* holds a 'examples.nets.layernorm_mlp:build'"):
        load(args)
    cfg, _ = load([*args, f"policy.net={CUSTOM}"])
    assert cfg.league.seed_snapshots == [str(path)]
    path.write_bytes(b"not a snapshot")
    with pytest.raises(ConfigError, match=r"league.seed_snapshots\[0\]: not a readable"):
        load(args)


def test_a_team_policy_exports_and_its_graphs_drive_a_squad_as_torch_does(tmp_path):
    """MAgent2 battle (a team game): the published mixture of an MLP and a channels-last conv
    member exports like any other, policy.json keeps the game's teams, and each graph gives the
    torch model's probabilities on a squad's real rows (every agent of a side, one batch)."""
    pytest.importorskip("magent2")
    import onnxruntime as ort

    battle = "pettingzoo-parallel:magent2.environments.battle_v4:parallel_env"
    params = {"map_size": 16, "teams": {"prefix": ["red_", "blue_"], "score": "survivors"}}
    info = game_info(battle, **params)
    assert info.team_size == 6 and info.channels_last
    torch.manual_seed(3)
    models = [build_policy(PolicySpec(info.obs_size, info.num_actions, (32,), obs_shape=info.obs_shape,
                                      channels_last=True)),
              build_policy(PolicySpec(info.obs_size, info.num_actions, net="conv", obs_shape=info.obs_shape,
                                      channels_last=True, channels=8, blocks=1))]
    league_store(tmp_path / "run", models, [0.5, 0.5], game=battle)
    from league.store import LeagueStore

    with LeagueStore(tmp_path / "run") as store:
        store.set_meta("game_params", params)
    out = subprocess.run([sys.executable, "-m", "serve.export", "--storage", str(tmp_path / "run"),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    meta = json.loads((tmp_path / "out/policy.json").read_text())
    assert meta["game"] == battle and meta["game_params"] == params and meta["observation"] is None
    squads = [make_game(battle, 4, seed=s, **params).observe_side(s % 2) for s in range(2)]
    obs = np.concatenate([b.obs for b in squads])
    mask = np.concatenate([b.mask for b in squads])
    assert len(obs) == 2 * 4 * 6
    for m, model in zip(meta["members"], models):
        got = ort.InferenceSession(str(tmp_path / "out" / m["file"])).run(None, {"obs": obs, "mask": mask})[0]
        np.testing.assert_allclose(got, model.probs(obs, mask), atol=1e-5, rtol=0)


def test_bench_nets_stacked_prints_both_passes_and_the_one_stacked_probs_picks(capsys):
    from bench.nets import STACK_SHAPES, STACK_WIDTHS, main

    assert main(["--stacked", "--seconds", "0.01", "--game", "kuhn_poker"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [tuple(line["hidden"]) for line in lines] == list(STACK_WIDTHS)
    for line in lines:
        assert line["stacked_probs_picks"] == ("stacked" if line["weights"] <= STACK_MAX_WEIGHTS else "one pass each")
        assert set(line["shapes"]) == {f"{g}x{n}" for g, n in STACK_SHAPES}
        assert all(s["stacked_ms"] > 0 and s["one_each_ms"] > 0 for s in line["shapes"].values())


def test_architecture_changes_name_what_a_resumed_network_keeps():
    from policies.net import PolicySpec, architecture_changes

    saved = PolicySpec(obs_size=126, num_actions=7, hidden=(256, 256), activation="tanh")
    assert architecture_changes(saved, PolicySpec(obs_size=126, num_actions=7, hidden=[256, 256])) == []
    relu = PolicySpec(obs_size=126, num_actions=7, hidden=(256, 256), activation="relu")
    assert architecture_changes(saved, relu) == ["activation tanh, not relu"]
    wider = PolicySpec(obs_size=126, num_actions=7, hidden=(512,), activation="relu", search_value=True)
    assert architecture_changes(saved, wider) == ["hidden (256, 256), not (512,)", "activation tanh, not relu"]
