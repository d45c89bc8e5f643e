"""deploy/kuberay/rayjob.yaml stays in step with the project: entrypoint, Ray version, storage resource."""

import shlex
import sys
from pathlib import Path

import ray
import yaml

from league.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def documents():
    with open(ROOT / "deploy" / "kuberay" / "rayjob.yaml", encoding="utf-8") as f:
        return list(yaml.safe_load_all(f))


def rayjob():
    (job,) = [d for d in documents() if d["kind"] == "RayJob"]
    return job


def test_entrypoint_is_the_launcher_with_a_shipped_config_that_loads():
    argv = shlex.split(rayjob()["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "actors.launch"]
    config = argv[argv.index("--config") + 1]
    overrides = [a for a in argv[3:] if "=" in a]
    cfg = load_config(ROOT / config, overrides)  # the config and its overrides validate
    assert cfg.run.storage.startswith("/data/")  # on the head's volume, not in the job's working dir


def test_every_image_is_the_installed_ray_for_this_python():
    spec = rayjob()["spec"]
    cluster = spec["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"], *[g["template"] for g in cluster["workerGroupSpecs"]],
            spec["submitterPodTemplate"]]
    images = [c["image"] for pod in pods for c in pod["spec"]["containers"]]
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    assert images and all(i == f"rayproject/ray:{ray.__version__}-{python}" for i in images), images
    assert cluster["rayVersion"] == ray.__version__


def test_head_declares_the_storage_resource_the_config_names_and_holds_the_volume():
    spec = rayjob()["spec"]
    argv = shlex.split(spec["entrypoint"])
    cfg = load_config(ROOT / argv[argv.index("--config") + 1], [a for a in argv[3:] if "=" in a])
    head = spec["rayClusterSpec"]["headGroupSpec"]
    declared = yaml.safe_load(yaml.safe_load(head["rayStartParams"]["resources"]))
    assert cfg.ray.storage_resource in declared and declared[cfg.ray.storage_resource] >= 1
    for group in spec["rayClusterSpec"]["workerGroupSpecs"]:
        assert cfg.ray.storage_resource not in str(group.get("rayStartParams", {}))
    (container,) = head["template"]["spec"]["containers"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert any(cfg.run.storage.startswith(m + "/") for m in mounts)
    claim = {v["persistentVolumeClaim"]["claimName"] for v in head["template"]["spec"]["volumes"]}
    assert claim <= {d["metadata"]["name"] for d in documents() if d["kind"] == "PersistentVolumeClaim"}
    assert 8000 in {p["containerPort"] for p in container["ports"]}
    assert spec["shutdownAfterJobFinishes"] is True
