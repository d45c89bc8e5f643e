"""Prober: how exploitable the published Nash mixture is, in the game itself.

Meta-exploitability only compares the mixture with the pool's own members; it
reads 0 when no member beats the mixture, however exploitable the mixture is.
Every ``evaluator.probe_every_seconds`` this actor takes the current Nash
mixture, trains a fresh PPO best response against it
(``evaluation.best_response.probe``, ``evaluator.probe_steps`` decisions) and
records its mean return with a 95% confidence interval as the measurement
``probe_br_return``: a lower bound on the mixture's exploitability. Ray
reserves ``evaluator.probe_num_cpus`` for it. While it probes it uses one core,
so its share of the machine is a probe's duration over ``probe_every_seconds``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import ray
import torch

from actors.loop import CONTROL_OPTIONS, control, one_loop
from league.config import Config
from league.measures import PROBE
from evaluation.best_response import ProbeConfig, probe
from policies.snapshot import policy_from_bytes

log = logging.getLogger(__name__)


class ProberImpl:
    def __init__(self, cfg: Config, coordinator, seed: int = 0):
        torch.set_num_threads(1)
        self.cfg = cfg
        self.coordinator = coordinator
        self.seed = int(seed)
        self._stop = threading.Event()
        self.probes = 0
        self.rounds = 0

    @control
    def get_stats(self) -> dict[str, Any]:
        """This life's work, as ``Evaluator.get_stats``: loop rounds (idle ones too) and probes done."""
        return {"pid": os.getpid(), "rounds": self.rounds, "probes": self.probes}

    @control
    def stop(self) -> None:
        self._stop.set()

    def probe_once(self) -> dict | None:
        """One probe of the current Nash mixture, recorded; None while there is no mixture."""
        nash = ray.get(self.coordinator.nash.remote())
        if not nash.ids:
            return None
        models = [policy_from_bytes(ray.get(self.coordinator.get_snapshot.remote(i))) for i in nash.ids]
        ev = self.cfg.evaluator
        out = probe(self.cfg.game.name, models, nash.weights,
                    ProbeConfig(steps=ev.probe_steps, eval_episodes=ev.probe_eval_episodes,
                                num_envs=ev.probe_num_envs, seed=self.seed + self.probes),
                    params=self.cfg.game.kwargs)
        self.probes += 1
        data = {"ci95": out["ci95"], "steps": out["steps"], "episodes": out["episodes"], "seconds": out["seconds"],
                "pool_version": nash.pool_version, "support": len(nash.ids),
                "meta_exploitability": nash.meta_exploitability}
        for key in ("exact_br_return", "exact_nash_conv", "trained_exact_return"):
            if key in out:
                data[key] = out[key]
        ray.get(self.coordinator.record_measurement.remote(PROBE, out["br_return"], data))
        return {"br_return": out["br_return"], **data}

    @one_loop
    def run(self) -> int:
        every = self.cfg.evaluator.probe_every_seconds
        next_at = time.time() + every
        while not self._stop.wait(timeout=max(0.0, min(1.0, next_at - time.time()))):
            self.rounds += 1
            if time.time() < next_at:
                continue
            try:
                self.probe_once()
            except (KeyError, ValueError, ray.exceptions.RayTaskError) as exc:
                log.info("probe skipped (%s)", exc)  # a member was evicted meanwhile
            next_at = time.time() + every
        return self.probes


Prober = ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=2, **CONTROL_OPTIONS)(ProberImpl)
