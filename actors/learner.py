"""Learner: one per role instance. Ingests its own side's trajectories and trains on them: PPO,
or, for a role with ``learner: search``, towards its searched moves' targets (policies.expert).

It publishes weights by version (rollout workers pull them when their version
is stale), checkpoints parameters and optimizer through the coordinator's
store, asks the coordinator after each update whether its role's rule wants a
snapshot, and resets (fresh orthogonal initialisation, or a configured
starting snapshot) when the coordinator says so. After a restart it resumes
from its last checkpoint.

With ``learner.replicas`` > 1 the role instance is a group of such learners, data parallel
(``actors.learner_group``): replica 0 does everything above that involves the coordinator, and
every replica trains on its own workers' batches in lockstep with the others.
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

from actors.learner_group import backend_for, broadcast_bytes, join_group
from actors.outbox import DeliveryLog, Outbox
from envs import make_game
from envs.symmetry import game_symmetries
from league import measures
from league.config import Config
from league.messages import EpisodeGroups, LearnerAck, WeightsReply
from league.objectives import LearnerObjective, ShaperError
from league.seeds import seed_int
from monitoring.metrics import LeagueMetrics
from policies.device import resolve_device
from policies.net import architecture_changes, average_rate, build_policy, follow, policy_spec
from policies import expert
from policies.optim import Adam
from policies.replica_group import ReplicaGroup
from policies.ppo import make_optimizer, ppo_update, pull_magnet, scheduled_lr, set_lr
from policies.rollout import Rollout
from policies.snapshot import (learner_average_from_bytes, learner_magnet_from_bytes, learner_state_from_bytes,
                               learner_state_to_bytes, policy_from_bytes, policy_to_bytes)

log = logging.getLogger(__name__)

KEPT_VERSIONS = 16  # published versions a learner keeps for weights_at (a group plays the version it opened with)

OBJECTIVE_RECORD_SECONDS = 10.0  # how often a learner's novelty and reward gap go to the store (the report)
GROUP_WATCH_SECONDS = 1.0  # how often a learner group's replica checks that its generation still stands


class LearnerImpl:
    def __init__(self, learner_id: str, role: str, cfg: Config, obs_size: int, num_actions: int, coordinator,
                 obs_shape: tuple[int, ...] = (), channels_last: bool = False, replica: tuple[int, int] = (0, 1),
                 rendezvous=None):
        torch.set_num_threads(1)
        self.learner_id = learner_id
        self.rank, self.replicas = int(replica[0]), int(replica[1])
        self.leader = self.rank == 0
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
        self.symmetries = (game_symmetries(make_game(cfg.game.name, 1, seed=0, **cfg.game.kwargs))
                           if self.searched and cfg.search_learner.symmetries else None)
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
            changes = architecture_changes(self.model.spec, self.spec)
            if changes:
                log.warning("%s resumed its checkpoint's network (%s); the config's policy applies to a fresh "
                            "run only", learner_id, "; ".join(changes))
        log.info("%s trains on %s (replica %d of %d)", learner_id, self.device, self.rank + 1, self.replicas)
        # magnet-regularised PPO (policies.ppo): the magnet starts at the policy and follows it
        saved_state = checkpoint.state if checkpoint is not None else None
        self.magnet = None
        if self.ppo.magnet_coef > 0:
            saved = learner_magnet_from_bytes(saved_state) if saved_state else None
            self.magnet = saved.to(self.device) if saved is not None else copy.deepcopy(self.model)
        # the network snapshots are taken from: the weights, or their moving average (policy.snapshot_average)
        self.average = None
        if cfg.policy.snapshot_average > 0:
            saved = learner_average_from_bytes(saved_state) if saved_state else None
            self.average = saved.to(self.device) if saved is not None else copy.deepcopy(self.model)
        self.group = ReplicaGroup.single()
        self._resync = False  # replica 0 reset: the others take its state at the next update
        if self.replicas > 1:
            self.rendezvous = rendezvous
            self.generation, self.group = join_group(rendezvous, self.rank, self.replicas,
                                                     backend_for(self.device, cfg.learner.num_gpus))
            self._collective(self._take_leader_state)
            threading.Thread(target=self._watch_group, name="group-watch", daemon=True).start()
        self._recent: dict[int, bytes] = {}  # version -> policy blob, the newest KEPT_VERSIONS (weights_at)
        self.life = os.urandom(4).hex()  # this process's life: its versions' weights are its own
        self._publish()
        self._last_checkpoint = time.time()
        if not self.leader:
            return
        ray.get(coordinator.learner_started.remote(learner_id, self.version, self.step))
        # Snapshots go out through the outbox: one that a past life sent but never saw
        # acknowledged is sent again (the coordinator answers a repeat with the same agent).
        self.outbox = Outbox(cfg.run.storage, f"learner:{learner_id}")
        pending = self.outbox.pending()
        if pending is not None:
            seq, arr = pending
            reply = self._send_snapshot(seq, arr["blob"].tobytes(), int(arr["step"]), json.loads(str(arr["metadata"])))
            if reply.reset:
                self._reset(reply.reset_to)

    # -- the group (learner.replicas > 1) ------------------------------------------
    def _collective(self, fn, *args):
        """Run ``fn`` that talks to the other replicas; a broken group (a replica died) ends this
        process, so that Ray restarts it into the group's next generation (actors.learner_group)."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - whatever the backend raised, the group is gone
            log.error("%s replica %d: the learner group broke (%s); restarting", self.learner_id, self.rank, exc)
            os._exit(1)

    def _state_bytes(self) -> bytes:
        return learner_state_to_bytes(self.model, self.optimizer, {"version": self.version, "step": self.step},
                                      magnet=self.magnet, average=self.average)

    def _take_leader_state(self) -> None:
        """Every replica ends with replica 0's parameters, optimizer, magnet, average, version and step."""
        blob = broadcast_bytes(self.group, self._state_bytes() if self.leader else None)
        if self.leader:
            return
        self.model, self.optimizer, extra = learner_state_from_bytes(
            blob, lambda m: self._optimizer(m.to(self.device)))
        self.version, self.step = int(extra["version"]), int(extra["step"])
        if self.magnet is not None:
            self.magnet = learner_magnet_from_bytes(blob).to(self.device)
        if self.average is not None:
            self.average = learner_average_from_bytes(blob).to(self.device)
        if self.searched:  # a reset learner does not train on its former self's targets
            self.replay = expert.Replay(self.replay.capacity, self.spec.obs_size, self.spec.num_actions)

    def _group_ready(self) -> bool:
        """Wait until every replica is ready for this update (True), or the league stops (False)."""
        verdict = ray.get(self.rendezvous.barrier.remote(self.generation, self.rank, self.updates))
        if verdict == "broken":
            self._collective(self._broken)
        return verdict == "go"

    def _watch_group(self) -> None:
        """End this process as soon as another replica restarted (a later generation opened), rather
        than at the next update: the group comes back whole sooner."""
        while True:
            time.sleep(GROUP_WATCH_SECONDS)
            try:
                stale = ray.get(self.rendezvous.address.remote(self.generation), timeout=60) == "stale"
            except ray.exceptions.RayError:  # the rendezvous itself restarting: ask again
                continue
            if stale:
                self._collective(self._broken)

    def _broken(self) -> None:
        raise RuntimeError("a replica restarted into the group's next generation")

    def _group_rows(self, rows: int) -> int:
        """The rows of this update over the group; replica 0's state goes to all after its reset."""
        control = torch.tensor([rows, int(self.leader and self._resync)], dtype=torch.int64)
        self.group.sum_(control)
        if control[1]:
            self._take_leader_state()
            self._resync = False
        return int(control[0])

    def weights_digest(self) -> tuple[int, int, str]:
        """The published version and step, and a digest of their parameters (the replicas of a
        group publish the same after every update). Read from the published weights, so that it
        answers while an update or a wait for the group runs."""
        import hashlib

        version, step, blob = self._weights
        h = hashlib.sha256()
        for tensor in policy_from_bytes(blob).state_dict().values():
            h.update(tensor.detach().cpu().numpy().tobytes())
        return version, step, h.hexdigest()

    def _optimizer(self, model) -> Adam:
        if self.searched:
            return expert.make_optimizer(model, self.cfg.search_learner)
        return make_optimizer(model, self.ppo)

    def _publish(self) -> None:
        self._weights = (self.version, self.step, policy_to_bytes(self.model))
        # the newest KEPT_VERSIONS: what a served rollout policy may still be asked to play (weights_at)
        self._recent[self.version] = self._weights[2]
        self._recent = {v: b for v, b in self._recent.items() if v > self.version - KEPT_VERSIONS}

    # -- rollout workers ---------------------------------------------------------
    def get_weights(self, known_version: int = -1, blob: bool = True) -> WeightsReply:
        """The current version, its step and policy blob; no blob when ``known_version`` is current,
        or when the caller asks for the version alone (``blob=False``: its policy is served)."""
        version, step, weights = self._weights
        return WeightsReply(version, weights if blob and version != known_version else None, step, self.life)

    def weights_at(self, version: int, life: str | None = None) -> bytes:
        """The policy blob of ``version``, one of the newest ``KEPT_VERSIONS`` this process published
        (the served rollout policy loads the version a worker's group plays), of this ``life`` where
        one is named; KeyError otherwise."""
        if life is not None and life != self.life:
            raise KeyError(f"{self.learner_id} restarted: version {version} of life {life} is gone")
        try:
            return self._recent[int(version)]
        except KeyError:
            raise KeyError(f"{self.learner_id} keeps versions {min(self._recent)}..{max(self._recent)}, "
                           f"not {version}") from None

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
        if self.replicas > 1 and not self._group_ready():
            return  # the league is stopping: the batch stays buffered
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
        self.last_stats, rows = self._collective(self._train, data) if self.replicas > 1 else self._train(data)
        if self.magnet is not None:
            pull_magnet(self.magnet, self.model, self.ppo.magnet_rate)
        if self.average is not None:
            follow(self.average, self.model,
                   average_rate(self.cfg.policy.snapshot_average, self.last_stats["num_minibatches"]))
        self.version += 1
        self.updates += 1
        self.step += rows
        self._publish()
        if not self.leader:
            return
        self.metrics.inc("updates", role=self.role, learner=self.learner_id)
        for kind in ("policy", "value", "search_value"):  # search_value: policy.search_value's head
            if math.isfinite(self.last_stats.get(f"{kind}_loss", math.nan)):
                self.metrics.set("loss", self.last_stats[f"{kind}_loss"], learner=self.learner_id, kind=kind)
        self.metrics.set("loss", self.last_stats["entropy"], learner=self.learner_id, kind="entropy")
        decision = ray.get(self.coordinator.learner_progress.remote(self.learner_id, self.version, self.step))
        if decision.snapshot:
            self._snapshot()
        if time.time() - self._last_checkpoint > self.cfg.learner.checkpoint_every_seconds:
            self._checkpoint()

    def _train(self, data: Rollout) -> tuple[dict, int]:
        """One update on ``data``: its statistics and the rows it trained on (a group's: all replicas')."""
        group, rows = None, len(data)
        if self.replicas > 1:
            group = self.group
            rows = self._group_rows(rows)
        if self.searched:
            new = self.replay.add(data, self.cfg.search_learner.value_mix)
            stats = expert.expert_update(self.model, self.optimizer, self.replay, new, self.cfg.search_learner,
                                         group=group, symmetries=self.symmetries)
        else:
            set_lr(self.optimizer, scheduled_lr(self.ppo, self.step))
            stats = ppo_update(self.model, self.optimizer, data, self.ppo, magnet=self.magnet, group=group)
        return stats, rows

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
        frozen = self.average if self.average is not None else self.model
        blob, metadata = policy_to_bytes(frozen, self.cfg.policy.snapshot_play), {"updates": self.updates}
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
            start = policy_from_bytes(ray.get(self.coordinator.get_snapshot.remote(reset_to)), as_played=False)
            self.model.load_state_dict(start.state_dict())
        else:
            self.model.reset_parameters()
        self.optimizer = self._optimizer(self.model)
        if self.searched:  # a reset learner does not train on its former self's targets
            self.replay = expert.Replay(self.replay.capacity, self.spec.obs_size, self.spec.num_actions)
        if self.magnet is not None:
            self.magnet = copy.deepcopy(self.model)
        if self.average is not None:
            self.average = copy.deepcopy(self.model)
        self.version += 1
        self._resync = self.replicas > 1
        self._publish()
        log.info("%s reset (%s)", self.learner_id, reset_to or "fresh initialisation")

    def _checkpoint(self) -> None:
        if not self.leader:  # replica 0 checkpoints the group's state
            return
        extra = {"version": self.version, "step": self.step}
        if self.shaping.shaper is not None:
            try:
                extra["shaper_state"] = self.shaping.saved_state()
            except ShaperError as exc:
                log.error("%s: %s (checkpointed without it)", self.learner_id, exc)
        blob = learner_state_to_bytes(self.model, self.optimizer, extra, magnet=self.magnet, average=self.average)
        ray.get(self.coordinator.save_checkpoint.remote(self.learner_id, self.version, self.step, blob))
        self._last_checkpoint = time.time()

    def final_snapshot(self) -> str | None:
        """At a stop, once the workers have stopped: a main agent's weights trained since its last
        snapshot join the pool, as a scheduled snapshot does; the new agent's id, or None."""
        with self._lock:
            if not self.leader or not ray.get(self.coordinator.final_snapshot_due.remote(self.learner_id, self.step)):
                return None
            self._snapshot()
            return self.snapshots_acked[-1]

    def flush(self) -> dict[str, Any]:
        """Checkpoint now (on shutdown)."""
        with self._lock:
            self._checkpoint()
            return self.info()

    def info(self) -> dict[str, Any]:
        return {"learner_id": self.learner_id, "role": self.role, "version": self.version, "step": self.step,
                "replica": self.rank, "replicas": self.replicas,
                "device": str(self.device), "snapshots_acked": list(self.snapshots_acked), "pid": os.getpid(),
                "updates": self.updates, "skipped_updates": self.skipped_updates,
                "last_shaper_error": self.last_shaper_error, "deliveries_taken": self.deliveries.taken,
                "groups_taken": self.deliveries.groups, "deliveries_repeated": self.deliveries.repeats,
                "version_lag_last": self.version_lag["last"], "version_lag_max": self.version_lag["max"],
                **self.shaping.stats, **{f"loss_{k}": v for k, v in self.last_stats.items()}}


# Threaded so that get_weights answers while an update runs (torch frees the GIL).
Learner = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0.5, max_concurrency=4)(LearnerImpl)
