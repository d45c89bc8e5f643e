"""Learner: one per role instance. Ingests its own side's trajectories and trains on them: PPO,
or, for a role with ``learner: search``, towards its searched moves' targets (policies.expert).

It publishes weights by version (rollout workers pull them when their version
is stale), checkpoints parameters and optimizer through the coordinator's
store, asks the coordinator after each update whether its role's rule wants a
snapshot, and resets (fresh orthogonal initialisation, or a configured
starting snapshot) when the coordinator says so. After a restart it resumes
from its last checkpoint.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import threading
import time
from typing import Any

import numpy as np
import ray
import torch

from actors.outbox import DeliveryLog, Outbox
from league import measures
from league.config import Config
from league.messages import EpisodeGroups, LearnerAck, WeightsReply
from league.objectives import LearnerObjective, ShaperError
from league.seeds import seed_int
from monitoring.metrics import LeagueMetrics
from policies.device import resolve_device
from policies.net import build_policy, policy_spec
from policies import expert
from policies.ppo import make_optimizer, ppo_update, pull_magnet, scheduled_lr, set_lr
from policies.rollout import Rollout
from policies.snapshot import (learner_magnet_from_bytes, learner_state_from_bytes, learner_state_to_bytes,
                               policy_from_bytes, policy_to_bytes)

log = logging.getLogger(__name__)

OBJECTIVE_RECORD_SECONDS = 10.0  # how often a learner's novelty and reward gap go to the store (the report)


class LearnerImpl:
    def __init__(self, learner_id: str, role: str, cfg: Config, obs_size: int, num_actions: int, coordinator,
                 obs_shape: tuple[int, ...] = (), channels_last: bool = False):
        torch.set_num_threads(1)
        self.learner_id = learner_id
        self.role = role
        self.cfg = cfg
        self.ppo = cfg.ppo
        self.coordinator = coordinator
        self.spec = policy_spec(cfg.policy, obs_size, num_actions, obs_shape, channels_last)
        # initial weights and PPO's minibatch order: a stream of its own, the same in every process
        torch.manual_seed(seed_int(cfg.run.seed, "learner", learner_id))
        self.device = resolve_device(cfg.learner.device, ray.get_gpu_ids())
        self.model = build_policy(self.spec).to(self.device)
        self.searched = cfg.role(role).learner == "search"
        self.replay = (expert.Replay(cfg.search_learner.replay_positions, obs_size, num_actions)
                       if self.searched else None)
        self.optimizer = self._optimizer(self.model)
        self.version = 0
        self.step = 0
        self.updates = 0
        self.buffer: list[Rollout] = []
        self.group_buffer: list[EpisodeGroups] = []  # the buffer's groups (objective.k_opponents, shaper)
        # numbered group deliveries taken, each once (a restarted worker re-sends its staged one)
        self.deliveries = DeliveryLog()
        self.version_lag = {"last": 0, "max": 0}  # this version minus the groups' version, at intake
        self.buffered = 0
        self.objective = cfg.role(role).objective
        self.shaping = LearnerObjective(self.objective, seed_int(cfg.run.seed, "learner", learner_id, "novelty"))
        self.skipped_updates = 0
        self.last_shaper_error: str | None = None
        self._last_objective_record = 0.0
        self.snapshots_acked: list[str] = []  # ids the coordinator stored (this life)
        self.last_stats: dict[str, float] = {}
        self._lock = threading.Lock()
        self.metrics = LeagueMetrics()
        checkpoint = ray.get(coordinator.load_checkpoint.remote(learner_id))
        if checkpoint is not None and checkpoint.state:
            self.model, self.optimizer, extra = learner_state_from_bytes(
                checkpoint.state, lambda m: self._optimizer(m.to(self.device)))
            if self.searched:  # the config's learning rate and decay, not the ones the checkpoint was saved with
                for group in self.optimizer.param_groups:
                    group["lr"], group["weight_decay"] = cfg.search_learner.lr, cfg.search_learner.weight_decay
            self.version = int(extra.get("version", checkpoint.version))
            self.step = int(extra.get("step", checkpoint.step))
            self.shaping.restore(extra.get("shaper_state"))
            log.info("%s resumed at version %d, step %d", learner_id, self.version, self.step)
            if (self.model.spec.net, self.model.spec.args) != (self.spec.net, self.spec.args):
                log.warning("%s resumed its checkpoint's network (policy.net %s); the config's policy.net %s "
                            "applies to a fresh run only", learner_id, self.model.spec.net, self.spec.net)
        log.info("%s trains on %s", learner_id, self.device)
        # magnet-regularised PPO (policies.ppo): the magnet starts at the policy and follows it
        self.magnet = None
        if self.ppo.magnet_coef > 0:
            saved = learner_magnet_from_bytes(checkpoint.state) if checkpoint is not None and checkpoint.state else None
            self.magnet = saved.to(self.device) if saved is not None else copy.deepcopy(self.model)
        ray.get(coordinator.learner_started.remote(learner_id, self.version, self.step))
        # Snapshots go out through the outbox: one that a past life sent but never saw
        # acknowledged is sent again (the coordinator answers a repeat with the same agent).
        self.outbox = Outbox(cfg.run.storage, f"learner:{learner_id}")
        self._publish()
        pending = self.outbox.pending()
        if pending is not None:
            seq, arr = pending
            reply = self._send_snapshot(seq, arr["blob"].tobytes(), int(arr["step"]), json.loads(str(arr["metadata"])))
            if reply.reset:
                self._reset(reply.reset_to)
        self._last_checkpoint = time.time()

    def _optimizer(self, model) -> torch.optim.Optimizer:
        if self.searched:
            return expert.make_optimizer(model, self.cfg.search_learner)
        return make_optimizer(model, self.ppo)

    def _publish(self) -> None:
        self._weights = (self.version, self.step, policy_to_bytes(self.model))

    # -- rollout workers ---------------------------------------------------------
    def get_weights(self, known_version: int = -1) -> WeightsReply:
        """The current version, its step and policy blob; no blob when ``known_version`` is current."""
        version, step, blob = self._weights
        return WeightsReply(version, None if version == known_version else blob, step)

    def submit(self, rollout: Rollout, groups: EpisodeGroups | None = None) -> LearnerAck:
        """Take a batch of this learner's transitions; train when enough are buffered.

        A learner whose role plays in groups (``objective``) takes them with their
        ``EpisodeGroups``, once per ``(source, seq)``: a repeat (a restarted worker re-sending
        the delivery it had staged) is acknowledged and dropped, so no group is trained on twice.
        A re-sent delivery the learner had not taken is trained on like any other, however many
        versions ago its groups were played (docs/objectives.md). Returns after the batch is
        ingested (and any update it triggered ran): a worker that waits on this call before
        sending more is backpressured.
        """
        if not isinstance(rollout, Rollout):
            raise ValueError(f"submit takes a policies.rollout.Rollout, got {type(rollout).__name__}")
        batch = rollout
        batch.__post_init__()  # dtypes and lengths, as a sender outside this process may not have checked them
        if batch.obs.shape[1:] != (self.spec.obs_size,) or batch.mask.shape[1:] != (self.spec.num_actions,):
            raise ValueError(f"rollout shapes {batch.obs.shape}/{batch.mask.shape} do not fit the policy")
        if self.searched and batch.targets.shape[1:] != (self.spec.num_actions,) and len(batch):
            raise ValueError(f"{self.learner_id} learns from search: its rollouts carry targets of "
                             f"{self.spec.num_actions} actions, got shape {batch.targets.shape}")
        if self.objective.grouped:
            self._check_groups(batch, groups)
        elif groups is not None:
            raise ValueError(f"{self.learner_id} does not play in groups (objective.k_opponents 1, no shaper)")
        with self._lock:
            if groups is not None:
                if groups.seq is not None and not self.deliveries.take(groups.source, groups.seq, len(groups)):
                    log.info("%s: delivery %d of %s taken before, dropped", self.learner_id, groups.seq,
                             groups.source)
                    return LearnerAck(self.version, self.step)
                if len(groups):
                    lag = int(self.version - groups.version.min())
                    self.version_lag = {"last": lag, "max": max(lag, self.version_lag["max"])}
                self.group_buffer.append(groups)
            self.buffer.append(batch)
            self.buffered += len(batch)
            if self.buffered >= self.cfg.rollout.steps_per_batch:
                self._update()
            return LearnerAck(self.version, self.step)

    def _check_groups(self, rollout: Rollout, groups) -> None:
        if not isinstance(groups, EpisodeGroups):
            raise ValueError(f"{self.learner_id} plays in groups of {self.objective.k_opponents}: submit takes "
                             f"the rollout with its league.messages.EpisodeGroups, got {type(groups).__name__}")
        if groups.k != self.objective.k_opponents:
            raise ValueError(f"groups of {groups.k} episodes, {self.learner_id} plays {self.objective.k_opponents}")
        if groups.episodes != rollout.num_episodes:
            raise ValueError(f"groups name {groups.episodes} played episodes, the rollout holds {rollout.num_episodes}")
        if not np.array_equal(groups.acted[groups.played], np.broadcast_to(groups.version[:, None],
                                                                            groups.played.shape)[groups.played]):
            raise ValueError("a group's episodes were played by another version than the group's")
        if not np.allclose(groups.outcomes[groups.played], rollout.episode_returns(), atol=1e-4):
            raise ValueError("the groups' outcomes are not the rollout's episode returns")

    def buffered_groups(self) -> list[EpisodeGroups]:
        """Groups received and not yet trained on (they reach the shaper with the next update)."""
        with self._lock:
            return list(self.group_buffer)

    def _update(self) -> None:
        data = Rollout.concat(self.buffer)
        parts = self.group_buffer
        self.buffer, self.buffered, self.group_buffer = [], 0, []
        try:
            data = self._objective(data, parts)
        except ShaperError as exc:
            # that update only: the data is dropped, the policy and the shaper's state stay as they were
            self.skipped_updates += 1
            self.last_shaper_error = str(exc)
            log.error("%s skipped an update: %s", self.learner_id, exc)
            self.coordinator.learner_event.remote(self.learner_id, "shaper_error", {"error": str(exc)[:1000]})
            return
        if self.searched:
            new = self.replay.add(data, self.cfg.search_learner.value_mix)
            self.last_stats = expert.expert_update(self.model, self.optimizer, self.replay, new,
                                                   self.cfg.search_learner)
        else:
            set_lr(self.optimizer, scheduled_lr(self.ppo, self.step))
            self.last_stats = ppo_update(self.model, self.optimizer, data, self.ppo, magnet=self.magnet)
        if self.magnet is not None:
            pull_magnet(self.magnet, self.model, self.ppo.magnet_rate)
        self.metrics.inc("updates", role=self.role, learner=self.learner_id)
        for kind in ("policy", "value", "search_value"):  # search_value: policy.search_value's head
            if math.isfinite(self.last_stats.get(f"{kind}_loss", math.nan)):
                self.metrics.set("loss", self.last_stats[f"{kind}_loss"], learner=self.learner_id, kind=kind)
        self.metrics.set("loss", self.last_stats["entropy"], learner=self.learner_id, kind="entropy")
        self.version += 1
        self.updates += 1
        self.step += len(data)
        self._publish()
        decision = ray.get(self.coordinator.learner_progress.remote(self.learner_id, self.version, self.step))
        if decision.snapshot:
            self._snapshot()
        if time.time() - self._last_checkpoint > self.cfg.learner.checkpoint_every_seconds:
            self._checkpoint()

    def _objective(self, data: Rollout, parts: list[EpisodeGroups]) -> Rollout:
        """The rollout to train on (league.objectives.LearnerObjective), and its metrics."""
        data = self.shaping.prepare(data, parts)
        stats = self.shaping.stats
        for name in ("outcome_novelty", "reward_gap"):
            self.metrics.set(name, stats[name], learner=self.learner_id, role=self.role)
        now = time.time()
        if now - self._last_objective_record >= OBJECTIVE_RECORD_SECONDS:
            self._last_objective_record = now
            self.coordinator.record_measurement.remote(
                measures.OBJECTIVE, stats["outcome_novelty"],
                {"learner": self.learner_id, "role": self.role, **stats, "skipped_updates": self.skipped_updates,
                 "k_opponents": self.objective.k_opponents, "shaper": self.objective.shaper})
        return data

    def _snapshot(self) -> None:
        blob, metadata = policy_to_bytes(self.model), {"updates": self.updates}
        seq = self.outbox.next_seq()
        self.outbox.stage(seq, {"blob": np.frombuffer(blob, dtype=np.uint8), "step": self.step,
                                "metadata": json.dumps(metadata)})
        reply = self._send_snapshot(seq, blob, self.step, metadata)
        if reply.reset:
            self._reset(reply.reset_to)
        self._checkpoint()

    def _send_snapshot(self, seq: int, blob: bytes, step: int, metadata: dict):
        reply = ray.get(self.coordinator.add_snapshot.remote(self.learner_id, blob, step, metadata, request=seq))
        self.outbox.acked(seq, 1, [reply.agent_id])
        self.snapshots_acked.append(reply.agent_id)
        return reply

    def _reset(self, reset_to: str | None) -> None:
        if reset_to:
            start = policy_from_bytes(ray.get(self.coordinator.get_snapshot.remote(reset_to)))
            self.model.load_state_dict(start.state_dict())
        else:
            self.model.reset_parameters()
        self.optimizer = self._optimizer(self.model)
        if self.searched:  # a reset learner does not train on its former self's targets
            self.replay = expert.Replay(self.replay.capacity, self.spec.obs_size, self.spec.num_actions)
        if self.magnet is not None:
            self.magnet = copy.deepcopy(self.model)
        self.version += 1
        self._publish()
        log.info("%s reset (%s)", self.learner_id, reset_to or "fresh initialisation")

    def _checkpoint(self) -> None:
        extra = {"version": self.version, "step": self.step}
        if self.shaping.shaper is not None:
            try:
                extra["shaper_state"] = self.shaping.saved_state()
            except ShaperError as exc:
                log.error("%s: %s (checkpointed without it)", self.learner_id, exc)
        blob = learner_state_to_bytes(self.model, self.optimizer, extra, magnet=self.magnet)
        ray.get(self.coordinator.save_checkpoint.remote(self.learner_id, self.version, self.step, blob))
        self._last_checkpoint = time.time()

    def flush(self) -> dict[str, Any]:
        """Checkpoint now (on shutdown)."""
        with self._lock:
            self._checkpoint()
            return self.info()

    def info(self) -> dict[str, Any]:
        return {"learner_id": self.learner_id, "role": self.role, "version": self.version, "step": self.step,
                "device": str(self.device), "snapshots_acked": list(self.snapshots_acked), "pid": os.getpid(),
                "updates": self.updates, "skipped_updates": self.skipped_updates,
                "last_shaper_error": self.last_shaper_error, "deliveries_taken": self.deliveries.taken,
                "groups_taken": self.deliveries.groups, "deliveries_repeated": self.deliveries.repeats,
                "version_lag_last": self.version_lag["last"], "version_lag_max": self.version_lag["max"],
                **self.shaping.stats, **{f"loss_{k}": v for k, v in self.last_stats.items()}}


# Threaded so that get_weights answers while an update runs (torch frees the GIL).
Learner = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0.5, max_concurrency=4)(LearnerImpl)
