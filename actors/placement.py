"""Where the league's actors run on a Ray cluster (docs/cluster.md).

The coordinator is the only process that opens ``run.storage``: it must run,
and restart after a crash, on the node whose disk holds the store. Everything
else (learners, rollout workers, evaluators, Serve replicas) reaches the store
only through the coordinator's methods, so it may run on any node; per-role
config says how much of which resource it takes and whether to spread.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# A small amount of the storage resource: the coordinator needs the node, not the resource's capacity,
# and a second league on the same head still fits.
STORAGE_RESOURCE_AMOUNT = 0.01


def actor_options(section) -> dict[str, Any]:
    """Ray ``.options(...)`` of one role from its config section (learner, rollout, evaluator)."""
    options: dict[str, Any] = {"num_cpus": section.num_cpus, "num_gpus": section.num_gpus}
    if section.resources:
        options["resources"] = dict(section.resources)
    if section.scheduling == "spread":
        options["scheduling_strategy"] = "SPREAD"
    return options


def learner_options(section) -> dict[str, Any]:
    """A learner's ``.options(...)``: ``actor_options`` and, with ``learner.nice`` set, the nice value
    its process starts at. The raylet starts an actor's process at its ``worker_niceness`` (15)
    unless the actor's runtime env names another; that env is merged with the job's, so its
    working dir and other variables stay."""
    options = actor_options(section)
    if section.nice is not None:
        options["runtime_env"] = {"env_vars": {"RAY_worker_niceness": str(section.nice)}}
    return options


def coordinator_options(cfg) -> dict[str, Any]:
    """Pin the coordinator to the storage's node: by the configured custom resource that only that node
    declares, else by hard affinity to the launcher's node (the driver's node holds ``run.storage``).

    Hard (``soft=False``): if that node is gone the coordinator waits for it rather than restarting
    elsewhere on an empty disk and silently opening an empty league."""
    if cfg.ray.storage_resource:
        return {"resources": {cfg.ray.storage_resource: STORAGE_RESOURCE_AMOUNT}}
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node_id = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}


def check_storage_resource(cfg) -> str | None:
    """An error message when no live node declares ``ray.storage_resource`` (the coordinator would
    wait forever for a node that never comes), else None."""
    if not cfg.ray.storage_resource:
        return None
    import ray

    total = ray.cluster_resources().get(cfg.ray.storage_resource, 0.0)
    if total < STORAGE_RESOURCE_AMOUNT:
        return (f"ray.storage_resource: no node of this cluster declares the resource {cfg.ray.storage_resource!r}; "
                f"start the node that holds run.storage with --resources='{{\"{cfg.ray.storage_resource}\": 1}}'")
    return None


def job_working_dir(environ=os.environ) -> str | None:
    """The ``working_dir`` of the runtime env when this process is a ``ray job submit`` entrypoint."""
    raw = environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        runtime_env = json.loads(raw).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return None
    working_dir = runtime_env.get("working_dir")
    return str(working_dir) if working_dir else None


def resolve_storage(storage: str, cwd: str | os.PathLike | None = None, environ=os.environ) -> tuple[str, str | None]:
    """``run.storage`` as an absolute path, and a warning when that path is temporary.

    Under ``ray job submit --working-dir``, the entrypoint's working directory is Ray's unpacked copy
    of the uploaded directory (under the session's runtime_resources); Ray deletes it with the session,
    so a relative store would be lost with it."""
    path = Path(storage).expanduser()
    relative = not path.is_absolute()
    resolved = (Path(cwd or os.getcwd()) / path).resolve() if relative else path.resolve()
    warning = None
    if relative and job_working_dir(environ) is not None:
        warning = (f"run.storage={storage} is relative and this job runs in Ray's copy of its working directory: "
                   f"the store will live in {resolved}, which Ray deletes when the cluster's session ends. "
                   f"Give an absolute path on the storage node (a persistent volume on Kubernetes), "
                   f"e.g. run.storage=/data/league")
    return str(resolved), warning
