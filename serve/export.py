"""The league's published Nash mixture as files that play without torch, Ray or this project.

    python -m serve.export --storage runs/connect_four --out nash_policy
    python -m serve.export --storage runs/connect_four --out nash_ts --format torchscript

reads the latest published mixture from the run's store, read-only (``evaluation.stored_run``:
member ids, weights and each member's network) and writes, for
every member with a positive weight, one graph ``member-NN.onnx`` (or ``.pt``) that
maps ``obs`` float32 (N, obs_size) and ``mask`` bool (N, num_actions) to action
probabilities float32 (N, num_actions), exactly 0 on illegal actions, plus
``policy.json``: the members (file, agent id, weight), the game (name, parameters,
which OpenSpiel tensor is the observation), ``obs_size``, ``obs_shape``,
``num_actions`` and the action space. Each ``.onnx`` file holds its weights: the graph files and
``policy.json`` are the whole export. Playing the mixture means drawing one member
per episode by weight (docs/export.md has a player that needs only onnxruntime).

ONNX graphs come from ``torch.onnx.export(..., dynamo=True)`` (the torch.export-based
exporter; the TorchScript-based one is deprecated since torch 2.9) with a dynamic
batch axis; TorchScript files from ``torch.jit.trace``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from evaluation.stored_run import StoredRun
from league.errors import ArgumentParser, UsageError, fail
from policies.net import PolicyNet

FORMATS = ("onnx", "torchscript")
MANIFEST = "policy.json"
# where torch.onnx's exporter logs a warning per torchvision operator it cannot register
ONNX_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"


class ActionProbabilities(nn.Module):
    """A policy's ``(obs, mask) -> probabilities`` (softmax of its masked logits): the one
    function an exported member computes."""

    def __init__(self, model: PolicyNet):
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits, _ = self.model(obs, mask)
        return torch.softmax(logits, dim=-1)


def _example_inputs(model: PolicyNet, n: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros((n, model.spec.obs_size)), torch.ones((n, model.spec.num_actions), dtype=torch.bool)


class _NoTorchvisionNotes(logging.Filter):
    """Drops the ONNX exporter's "torchvision is not installed. Skipping torchvision::..." (one per
    torchvision operator it would register: the policies use none); its other records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("torchvision is not installed")


def export_onnx(model: PolicyNet, path: str | Path) -> Path:
    """Write ``model``'s action probabilities as one self-contained ONNX graph, its weights inside the
    file (inputs ``obs``, ``mask``; output ``probs``; any batch size). ValueError names the network
    when the exporter cannot trace it."""
    model = model.eval()
    batch = torch.export.Dim("batch")
    registration = logging.getLogger(ONNX_REGISTRATION_LOGGER)
    quiet = _NoTorchvisionNotes()
    registration.addFilter(quiet)
    try:
        # the exporter's progress lines go to stderr: the CLI's stdout is its one JSON line
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")  # its notes about axis names
            # external_data=False: the weights inside the .onnx file (the policies are far below
            # protobuf's 2 GB), so the graph file alone is the member
            torch.onnx.export(ActionProbabilities(model), _example_inputs(model), str(path),
                              input_names=["obs", "mask"], output_names=["probs"], external_data=False,
                              dynamic_shapes=({0: batch}, {0: batch}), dynamo=True, verbose=False)
    except Exception as exc:
        raise ValueError(f"cannot export the {model.spec.net} network to ONNX ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:300]})") from None
    finally:
        registration.removeFilter(quiet)
    return Path(path)


def export_torchscript(model: PolicyNet, path: str | Path) -> Path:
    """Write ``model``'s action probabilities as a traced TorchScript module (``torch.jit.load``)."""
    model = model.eval()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(ActionProbabilities(model), _example_inputs(model))
            traced.save(str(path))
    except Exception as exc:
        raise ValueError(f"cannot trace the {model.spec.net} network ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:300]})") from None
    return Path(path)


def _observation_tensor(game: str | None, params: dict) -> str | None:
    """Which OpenSpiel tensor the league's observation is (``envs.openspiel.state_tensor``), so a
    player can build it from a ``pyspiel`` state; None for other games."""
    from envs import is_openspiel_game

    if not game or not is_openspiel_game(game):
        return None
    try:
        from envs.openspiel import load_two_player_zero_sum, uses_information_state

        spiel_game = load_two_player_zero_sum(game, params or None)
    except Exception:  # not an OpenSpiel game (a user's game module)
        return None
    return "information_state_tensor" if uses_information_state(spiel_game) else "observation_tensor"


def export_mixture(storage: str | Path, out: str | Path, fmt: str = "onnx") -> dict:
    """Write the published Nash mixture of the league in ``storage`` to folder ``out``
    (module docstring); returns the manifest written to ``out/policy.json``.
    ValueError (``league.errors.UsageError`` for the store) when the store is not a league's or has
    no mixture, or a member cannot be exported."""
    if fmt not in FORMATS:
        raise UsageError("--format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    with StoredRun(storage) as run:
        nash = run.nash()
        ids, models, weights = run.nash_mixture()
        game, params = run.game, run.game_params
    members = list(zip(ids, weights))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    total = sum(w for _, w in members)
    entries = []
    for k, ((agent_id, weight), model) in enumerate(zip(members, models)):
        name = f"member-{k:02d}.{'onnx' if fmt == 'onnx' else 'pt'}"
        (export_onnx if fmt == "onnx" else export_torchscript)(model, out / name)
        entries.append({"file": name, "agent_id": agent_id, "weight": weight / total, "net": model.spec.net})
    spec = models[0].spec
    manifest = {
        "format": fmt,
        "game": game,
        "game_params": params,
        "observation": _observation_tensor(game, params),
        "obs_size": spec.obs_size,
        "obs_shape": list(spec.obs_shape),
        "channels_last": spec.channels_last,
        "num_actions": spec.num_actions,
        "action_space": {"type": "discrete", "n": spec.num_actions},
        "inputs": {"obs": ["float32", "N", spec.obs_size], "mask": ["bool", "N", spec.num_actions]},
        "output": {"probs": ["float32", "N", spec.num_actions]},
        "nash": {"solved_at": nash["solved_at"], "pool_version": nash["pool_version"], "method": nash["method"]},
        "members": entries,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python -m serve.export",
                                     description="Write a league's published Nash mixture as ONNX (or TorchScript) "
                                                 "graphs plus policy.json.")
    parser.add_argument("--storage", required=True, metavar="RUN_DIR", help="the league's run folder (run.storage)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write (created if missing)")
    parser.add_argument("--format", default="onnx", choices=FORMATS)
    args = parser.parse_args(argv)
    try:
        manifest = export_mixture(args.storage, args.out, args.format)
    except UsageError as exc:
        return fail(exc)
    except Exception as exc:  # a member the exporter cannot trace, a folder that cannot be written: one line
        return fail("serve.export", exc)
    print(json.dumps({"out": str(args.out), "format": manifest["format"], "game": manifest["game"],
                      "members": {m["agent_id"]: round(m["weight"], 6) for m in manifest["members"]}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
