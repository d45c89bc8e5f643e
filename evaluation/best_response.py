"""Approximate exploitability of any game: train a fresh best response with PPO.

For a target policy sigma (one network, a league's Nash mixture that draws one
member per episode, or uniform random) the best response's expected return,
with its seat drawn uniformly per episode, is::

    BR(sigma) = 1/2 [ max_pi u_0(pi, sigma) + max_pi u_1(sigma, pi) ]

which in a two-player zero-sum game is sigma's exploitability (NashConv / 2;
Lanctot et al. 2017, "A Unified Game-Theoretic Approach to Multiagent
Reinforcement Learning", section 3). A best response trained by reinforcement
learning reaches at most that value, so the return it achieves is a lower
bound on the exploitability: the approach of OpenSpiel's ``rl_response``
(Timbers et al. 2022, "Approximate Exploitability: Learning a Best Response",
IJCAI) with the league's own PPO (``policies.ppo``), network
(``policies.net``) and rollout (``policies.rollout.collect_rollout``).

The probe trains for a fixed budget of the best response's own decisions,
then plays fresh episodes with the trained policy (greedy by default) and
reports their mean return with a 95% confidence interval (normal
approximation; the episodes are independent). For games small enough to
enumerate (Kuhn and Leduc poker) it adds the exact best-response value
(``exact_br_return``, from ``evaluation.exploitability``) and the exact expected
return of the policy it trained (``trained_exact_return``), so the gap between
probe and truth is visible.

CLI::

    python -m evaluation.best_response --storage RUN_DIR [--agent ID] [--steps N]
    python -m evaluation.best_response --uniform --game kuhn_poker [--steps N]

prints one JSON line with ``br_return``, ``ci95`` ([low, high]) and, where the
game is enumerable, ``exact_br_return``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from envs import MatrixGame, make_game
from evaluation.exploitability import (_table, info_states, nash_conv_of_mixture, policy_table, returns_from_reach,
                                      table_reach)
from evaluation.stored_run import StoredRun
from league.errors import ArgumentParser, UsageError, fail
from policies.net import ActorCritic, PolicySpec
from policies.ppo import PPOConfig, make_optimizer, ppo_update
from policies.rollout import EpisodeMixture, collect_rollout


def _probe_ppo() -> PPOConfig:
    # One fixed opponent makes this a single-agent problem: a larger step size
    # than the league's learners (annealed to 0); the entropy bonus follows
    # ProbeConfig's schedule (docs/design.md has the measurements).
    return PPOConfig(lr=1e-3, ent_coef=0.0, epochs=4, minibatch_size=1024)


@dataclass
class ProbeConfig:
    """Budget and settings of one best-response probe."""

    steps: int = 600_000  # the best response's own training decisions
    eval_episodes: int = 50_000
    num_envs: int = 256
    batch_steps: int = 4096  # decisions per PPO update
    hidden: tuple[int, ...] = (128, 128)
    greedy: bool = True  # evaluate the most probable action (a best response is deterministic)
    # Entropy bonus from ent_start down to 0 over the first ent_anneal_fraction of the
    # budget, then none: a small constant bonus let the policy turn deterministic early
    # (folding weak Leduc hands that the best response calls with) and plateau at 70% of
    # the best-response value against a trained target; this schedule reached 91-93%.
    ent_start: float = 0.3
    ent_anneal_fraction: float = 0.7
    anneal_lr: bool = True
    seed: int = 0
    ppo: PPOConfig = field(default_factory=_probe_ppo)

    def __post_init__(self):
        for name in ("steps", "eval_episodes", "num_envs", "batch_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"probe {name} must be >= 1, got {getattr(self, name)}")


def mean_ci95(values: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Mean and normal-approximation 95% confidence interval of i.i.d. samples."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("no samples")
    mean = float(v.mean())
    half = 1.959964 * float(v.std(ddof=1)) / math.sqrt(v.size) if v.size > 1 else float("inf")
    return mean, (mean - half, mean + half)


def train_best_response(game, target: EpisodeMixture, cfg: ProbeConfig, rng: np.random.Generator):
    """A fresh ``ActorCritic`` trained by PPO against ``target`` for ``cfg.steps``
    of its own decisions on the VectorGame ``game``; returns (model, stats)."""
    torch.manual_seed(cfg.seed)
    model = ActorCritic(PolicySpec(game.obs_size, game.num_actions, tuple(cfg.hidden)))
    optimizer = make_optimizer(model, cfg.ppo)
    generator = torch.Generator().manual_seed(cfg.seed)
    steps, updates, train_returns = 0, 0, []
    while steps < cfg.steps:
        done = steps / cfg.steps
        ent = cfg.ent_start * max(0.0, 1.0 - done / cfg.ent_anneal_fraction) if cfg.ent_anneal_fraction > 0 else 0.0
        ppo = dataclasses.replace(cfg.ppo, ent_coef=cfg.ppo.ent_coef + ent)
        if cfg.anneal_lr:
            for group in optimizer.param_groups:
                group["lr"] = cfg.ppo.lr * (1.0 - done)
        game.reset()  # whole episodes only: a seat and a target member are drawn at an episode's start
        rollout, returns = collect_rollout(game, model, target, min(cfg.batch_steps, cfg.steps - steps), rng,
                                           value="return")
        if len(rollout):
            ppo_update(model, optimizer, rollout, ppo, generator=generator)
        steps += max(len(rollout), 1)
        updates += 1
        train_returns.append(float(np.mean(returns)) if len(returns) else 0.0)
    tail = train_returns[-max(1, len(train_returns) // 10):]
    return model, {"steps": steps, "updates": updates, "train_return_last": float(np.mean(tail))}


def evaluate(game, model, target, episodes: int, rng: np.random.Generator,
             greedy: bool = True, seats: str = "random", value: str = "return") -> np.ndarray:
    """The returns (or ``collect_rollout``'s other ``value``) of at least ``episodes`` fresh
    episodes of ``model`` (seat drawn per episode, or alternated: ``collect_rollout``'s
    ``seats``) against ``target``, an ``EpisodeMixture`` or an ``(obs, mask) -> actions``
    callable."""
    out: list[np.ndarray] = []
    n = 0
    while n < episodes:
        game.reset()
        _, returns = collect_rollout(game, model, target, max(1, episodes - n), rng, deterministic=greedy,
                                     value=value, seats=seats)
        out.append(returns)
        n += len(returns)
    return np.concatenate(out)


def greedy_table(game_name: str, model) -> np.ndarray:
    """Probability table (``evaluation.exploitability`` order) of ``model``'s
    most probable legal action at every information state."""
    states = info_states(game_name)
    probs = np.where(states.mask, policy_table(game_name, model), -1.0)
    table = np.zeros_like(probs)
    table[np.arange(len(table)), probs.argmax(axis=1)] = 1.0
    return table


def exact_values(game_name: str, members, weights, model, greedy: bool) -> dict:
    """Exact best-response value of the mixture and exact return of ``model``
    against it (both averaged over the two seats)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    tables = np.stack([_table(game_name, m) for m in members])
    mine = (greedy_table(game_name, model) if greedy else policy_table(game_name, model))[None]
    as_seat0 = returns_from_reach(game_name, table_reach(game_name, mine, 0), table_reach(game_name, tables, 1))
    as_seat1 = -returns_from_reach(game_name, table_reach(game_name, tables, 0), table_reach(game_name, mine, 1))
    trained = 0.5 * (float(as_seat0[0] @ w) + float(as_seat1[:, 0] @ w))
    exact = nash_conv_of_mixture(game_name, members, w)
    return {"exact_br_return": exact["exploitability"], "exact_nash_conv": exact["nash_conv"],
            "trained_exact_return": trained}


def probe(game_name: str, members, weights, cfg: ProbeConfig | None = None, params: dict | None = None) -> dict:
    """Train a best response to the per-episode mixture of ``members`` (ActorCritic
    or None = uniform random) with ``weights``, and measure it. Returns the dict
    the CLI prints (see module docstring)."""
    cfg = cfg or ProbeConfig()
    t0 = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    game = make_game(game_name, cfg.num_envs, seed=cfg.seed, **(params or {}))
    target = EpisodeMixture(members, weights, rng)
    for m in members:
        if m is not None and (m.spec.obs_size, m.spec.num_actions) != (game.obs_size, game.num_actions):
            raise ValueError(f"a target network expects obs_size={m.spec.obs_size}, num_actions="
                             f"{m.spec.num_actions}; {game_name} has {game.obs_size}, {game.num_actions}")
    model, stats = train_best_response(game, target, cfg, rng)
    train_seconds = time.perf_counter() - t0
    returns = evaluate(game, model, target, cfg.eval_episodes, rng, greedy=cfg.greedy)
    mean, (low, high) = mean_ci95(returns)
    out = {
        "game": game_name,
        "br_return": mean,
        "ci95": [low, high],
        "episodes": int(len(returns)),
        "steps": int(stats["steps"]),
        "updates": int(stats["updates"]),
        "greedy": bool(cfg.greedy),
        "train_seconds": round(train_seconds, 2),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    # exact_values walks OpenSpiel information states; the game says whether that is affordable
    if game.supports_exact and not isinstance(game, MatrixGame):
        out.update(exact_values(game_name, members, weights, model, cfg.greedy))
    return out


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------
def _stored_target(run_dir: str, agent: str | None, game: str | None = None):
    """(game name, game params, members, weights, description) from a league store
    (``evaluation.stored_run``: read-only, its game checked against ``game`` first)."""
    with StoredRun(run_dir, game) as run:
        if run.game is None:
            raise UsageError("--storage", f"{run.path} records no game name")
        ids, members, weights = run.subject(agent)
        if agent:
            return run.game, run.game_params, members, weights, {"policy": f"agent:{agent}"}
        return run.game, run.game_params, members, weights, {
            "policy": "nash_mixture", "members": dict(zip(ids, weights)),
            "meta_exploitability": run.nash()["meta_exploitability"]}


def main(argv=None) -> int:
    parser = ArgumentParser(
        prog="python -m evaluation.best_response",
        description="Approximate exploitability: train a PPO best response against a league's Nash mixture, "
                    "one snapshot, or uniform random play; prints one JSON line.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--storage", metavar="RUN_DIR", help="a league run folder (its latest Nash mixture)")
    what.add_argument("--uniform", action="store_true", help="probe uniform random play (needs --game)")
    parser.add_argument("--agent", metavar="ID", help="with --storage: one snapshot instead of the Nash mixture")
    parser.add_argument("--game", help="game name (with --uniform)")
    defaults = ProbeConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps, help="training decisions of the best response")
    parser.add_argument("--eval-episodes", type=int, default=defaults.eval_episodes)
    parser.add_argument("--num-envs", type=int, default=defaults.num_envs)
    parser.add_argument("--stochastic", action="store_true", help="evaluate the sampled policy, not the greedy one")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.agent and not args.storage:
        parser.error("--agent needs --storage RUN_DIR")
    if args.uniform and not args.game:
        parser.error("--uniform needs --game")
    torch.set_num_threads(1)
    try:
        cfg = ProbeConfig(steps=args.steps, eval_episodes=args.eval_episodes, num_envs=args.num_envs,
                          greedy=not args.stochastic, seed=args.seed)
        if args.uniform:
            game, params, members, weights, about = args.game, {}, [None], [1.0], {"policy": "uniform"}
        else:
            game, params, members, weights, about = _stored_target(args.storage, args.agent, args.game)
        out = {**about, **probe(game, members, weights, cfg, params)}
    except UsageError as exc:
        return fail(exc)
    except (ValueError, KeyError) as exc:
        return fail("evaluation.best_response", exc)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
