"""The smoke league submitted as a job (`ray job submit -- python -m actors.launch`) to a three-node
Ray cluster on one machine, watched by `make monitor`'s Prometheus (the shipped config, unedited),
then a node lost.

A head that declares ``league_storage`` (the store's node) and two worker nodes that declare
``league_worker``; the league is configured the way docs/cluster.md tells a user to: the coordinator
on the storage resource, learners / rollout workers / evaluators / opponents replicas on
``league_worker``, spread, each role instance a learner group of two replicas (one on each worker
node). Placement is read from Ray's state API, never from our own code.
The second test kills a worker node mid-run and counts, exactly, that nothing acknowledged was lost.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import requests

from conftest import free_port, stop_ray_at
from league.store import LeagueStore
from policies.snapshot import policy_from_bytes

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DASHBOARD_PORT = 8268
HEAD_METRICS_PORT = 8081
SERVE_PORT = 8124

pytestmark = [pytest.mark.ray, pytest.mark.slow]

WORKER = {"league_worker": 0.01}
OVERRIDES = [
    "ray.storage_resource=league_storage",
    # each role instance a learner group of two replicas, spread over the two worker nodes; no league
    # exploiter, so that the league's eight learners and workers start within the waits below
    f"learner.resources={json.dumps(WORKER)}", "learner.scheduling=spread", "learner.replicas=2",
    "roles.league_exploiter.count=0",
    # nothing here reads the probe or the anchors: no prober or anchor judge to start on the workers
    "evaluator.probe_every_seconds=0", "anchors=[]",
    f"rollout.resources={json.dumps(WORKER)}", "rollout.scheduling=spread",
    f"evaluator.resources={json.dumps(WORKER)}",
    f"serve.resources={json.dumps(WORKER)}", "serve.num_replicas=2", f"serve.port={SERVE_PORT}",
    "run.max_minutes=4",
]


def wait_for(fn, timeout=120.0, every=1.0, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            value = fn()
        except Exception as exc:  # the cluster is changing under us: try again
            value, last = None, exc
        if value is not None and value is not False:
            return value
        time.sleep(every)
    raise AssertionError(f"{what} not reached in {timeout:.0f} s (last error: {last!r})")


ENV = dict(os.environ, RAY_AUTH_MODE="disabled", PATH=f"{BIN}:{os.environ['PATH']}")
GCS_PORT = 6391


def ray_cli(*args: str) -> None:
    out = subprocess.run([str(BIN / "ray"), *args], env=ENV, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def node_args(k: int, temp_dir: str | None = None) -> list[str]:
    """Ports of node ``k`` on this machine: each raylet gets its own worker-port range and agent ports,
    and a worker node its own ``temp_dir``, as a machine of its own has its own disk. Nodes sharing one
    temp dir share the session's runtime_resources: a node's agent, setting up the job's working_dir
    for its first actor, removes and unpacks again the folder the job's driver imports from (Ray's
    working_dir plugin unpacks with ``overwrite=True``), and the driver's next import fails."""
    return ["--node-ip-address=127.0.0.1", "--disable-usage-stats", f"--min-worker-port={10100 + 1000 * k}",
            f"--max-worker-port={10999 + 1000 * k}", f"--dashboard-agent-listen-port={52401 + k}",
            f"--metrics-export-port={HEAD_METRICS_PORT if k == 0 else 8091 + k}"] + \
        ([f"--temp-dir={temp_dir}"] if temp_dir else [])


def start_prometheus(folder: Path):
    """`make monitor` on the head node: Debian's Prometheus with the shipped config, unedited.
    Returns (process, its URL), or (None, None) where it is not installed."""
    if shutil.which("prometheus") is None:
        return None, None
    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(["prometheus", f"--config.file={ROOT / 'monitoring/prometheus/prometheus.yml'}",
                             f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address={url[7:]}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, url


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``ray start`` head (declares league_storage) + two worker nodes (league_worker), as a user starts them.
    Each worker node declares 8 CPUs (logical: all run on this machine), so that either one holds
    the whole league but its coordinator once the other is lost.

    The job's entrypoint runs with the cluster's PATH: the nodes start from the project's environment."""
    import ray
    from ray.util.state import list_nodes

    prom, prom_url = start_prometheus(tmp_path_factory.mktemp("prometheus"))
    # short: Ray's unix sockets live under a node's temp dir (a socket path holds at most 107 bytes)
    node_dirs = {k: tempfile.mkdtemp(prefix=f"rn{k}_", dir="/tmp") for k in (0, 1, 2)}
    try:
        ray_cli("start", "--head", f"--port={GCS_PORT}", "--num-cpus=2", '--resources={"league_storage": 1}',
                "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={DASHBOARD_PORT}",
                # a killed node is declared dead after ~3 s instead of ~15 s
                '--system-config={"health_check_period_ms": 1000, "health_check_failure_threshold": 3}',
                *node_args(0, node_dirs[0]))
        for k in (1, 2):
            ray_cli("start", f"--address=127.0.0.1:{GCS_PORT}", "--num-cpus=8",
                    f'--resources={{"league_worker": 1, "node_w{k}": 1}}', *node_args(k, node_dirs[k]))
        ray.init(address=f"127.0.0.1:{GCS_PORT}", namespace="league", log_to_driver=False)
        nodes = {n.node_id: n for n in wait_for(lambda: (lambda ns: ns if len(ns) == 3 else None)(
            list_nodes(filters=[("state", "=", "ALIVE")], detail=True)), timeout=60, what="three nodes")}
        head = next(i for i, n in nodes.items() if n.is_head_node)
        markers = {i: next(r for r in n.resources_total if r.startswith("node_w")) for i, n in nodes.items() if i != head}
        state = {"head": head, "workers": markers, "storage": tmp_path_factory.mktemp("cluster") / "store", "job": None,
                 "prometheus": prom_url}
        yield state
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
        job = (locals().get("state") or {}).get("job")
        if job is not None and job["proc"].poll() is None:
            job["proc"].kill()
        ray.shutdown()
        # its three nodes, and no other Ray on this machine (``ray stop`` would stop them all)
        for folder in node_dirs.values():
            stop_ray_at(folder)
        for folder in node_dirs.values():
            shutil.rmtree(folder, ignore_errors=True)


def kill_node(marker: str) -> None:
    """Kill -9 the raylet of the node that declares ``marker`` (its workers exit with it)."""
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "/raylet " in cmd and marker in cmd:
            os.kill(int(proc.name), 9)
            killed += 1
    assert killed == 1, f"expected one raylet declaring {marker}, killed {killed}"


def start_job(state):
    if state["job"] is not None:
        return state["job"]
    log = open(state["storage"].parent / "job.log", "w")
    cmd = [str(BIN / "ray"), "job", "submit", "--address", f"http://127.0.0.1:{DASHBOARD_PORT}",
           "--working-dir", str(ROOT),
           "--runtime-env-json", '{"excludes": [".venv", "runs", ".git", ".hypothesis", ".pytest_cache"]}',
           "--", "python", "-m", "actors.launch", "--config", "configs/smoke.yaml",
           f"run.storage={state['storage']}", *OVERRIDES]
    proc = subprocess.Popen(cmd, env=ENV, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    state["job"] = {"proc": proc, "log": log.name}
    return state["job"]


def interrupt_launcher(storage: Path) -> None:
    """Ctrl-C (SIGINT) the job's launcher, the driver process on the head node (every node is a
    process of this machine), as an operator stops a league before its budget."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv[1:3] == ["-m", "actors.launch"] and f"run.storage={storage}" in argv:  # not `ray job submit`
            pids.append(int(proc.name))
    assert len(pids) == 1, f"expected one launcher on {storage}, found {pids}"
    os.kill(pids[0], signal.SIGINT)


def actors_by_name():
    from ray.util.state import list_actors

    return {a.name: a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=10_000, detail=True) if a.name}


def replicas():
    from ray.util.state import list_actors

    return [a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=10_000, detail=True)
            if a.class_name.startswith("ServeReplica:opponents")]


def coordinator():
    import ray

    return ray.get_actor("coordinator", namespace="league")


def status():
    import ray

    return ray.get(coordinator().status.remote(), timeout=30)


def openers_of(directory: Path) -> set[int]:
    """Pids of every process on this machine (every node of the cluster runs here) with a file under
    ``directory`` open."""
    prefix = str(directory.resolve())
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target == prefix or target.startswith(prefix + "/"):
                    pids.add(int(proc.name))
        except OSError:
            continue
    return pids


def test_job_places_the_coordinator_on_the_storage_node_and_the_rest_on_workers(cluster):
    job = start_job(cluster)
    head, workers = cluster["head"], set(cluster["workers"])
    first = wait_for(lambda: (lambda s: s if s["pool_size"] >= 2 and s["games"] > 500 else None)(status()),
                     timeout=240, what="a first snapshot per learner")
    actors = wait_for(lambda: (lambda a: a if sum(n.startswith("worker:") for n in a) == 4 else None)(actors_by_name()),
                      what="four rollout workers (one per learner replica)")
    assert actors["coordinator"].node_id == head
    learners = [a for n, a in actors.items() if n.startswith("learner:")]
    rollout = [a for n, a in actors.items() if n.startswith("worker:")]
    evaluators = [a for n, a in actors.items() if n.startswith("evaluator:")]
    assert len(learners) == 4 and len(evaluators) == 1
    assert all(a.node_id in workers for a in learners + rollout + evaluators)
    # a learner group's two replicas, placed by its placement group: one on each worker node
    for lid in ("main_agent-0", "main_exploiter-0"):
        assert {actors[f"learner:{lid}"].node_id, actors[f"learner:{lid}:1"].node_id} == workers, lid
    # spread: both worker nodes run rollout workers or learners
    assert {a.node_id for a in learners + rollout} == workers
    served = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(replicas()), what="two opponents replicas")
    assert all(r.node_id in workers for r in served)

    # Only the coordinator has the store open, on any node (all nodes are processes of this machine).
    coordinator_pid = actors["coordinator"].pid
    for _ in range(3):
        assert openers_of(cluster["storage"]) == {coordinator_pid}
        time.sleep(1)

    # Progress: games and snapshots grow, a Nash mixture is solved, and the API on the head answers.
    later = wait_for(lambda: (lambda s: s if s["games"] > first["games"] and s["pool_size"] > first["pool_size"]
                              and s["nash_support"] >= 1 else None)(status()), timeout=120,
                     what="more games and snapshots, and a Nash mixture solved over them")
    assert later["nash_support"] >= 1
    with urllib.request.urlopen(f"http://127.0.0.1:{SERVE_PORT}/nash", timeout=30) as reply:
        nash = json.loads(reply.read())
    weights = [a["weight"] for a in nash["agents"]]
    assert weights and abs(sum(weights) - 1.0) < 1e-6
    assert job["proc"].poll() is None, open(job["log"]).read()[-3000:]

    # Prometheus scrapes the job's league, found through the targets file the launcher keeps
    if cluster["prometheus"] is None:
        pytest.skip("the Prometheus part needs Debian's prometheus (make test installs it)")
    session, endpoints = re.search(r"metrics of Ray session (\S+) at ([^;]+);", open(job["log"]).read()).groups()
    assert f":{HEAD_METRICS_PORT}" in endpoints  # the nodes' agents, the head's on the port it was started with

    def pools():
        got = requests.get(f"{cluster['prometheus']}/api/v1/query", timeout=10, params={
            "query": f'last_over_time(ray_league_pool_size{{SessionName="{session}"}}[10m])'}).json()
        roles = {p["metric"]["role"] for p in got["data"]["result"]}
        return roles if {"main_agent", "main_exploiter"} <= roles else None
    wait_for(pools, timeout=60, what="the league's pool sizes in Prometheus")


def test_node_loss_restarts_its_actors_elsewhere_and_loses_nothing_acknowledged(cluster):
    """Kill a worker node's raylet, then the coordinator: nothing acknowledged before is lost (==)."""
    import ray

    job = start_job(cluster)
    wait_for(lambda: status()["pool_size"] >= 2, timeout=240, what="a league with snapshots")
    actors = actors_by_name()
    victim_id = actors["worker:main_agent-0:0"].node_id
    (survivor_id,) = set(cluster["workers"]) - {victim_id}
    assert victim_id != cluster["head"]
    # named league actors come back under their names; Serve replaces a lost replica under a new name
    moved = sorted(n for n, a in actors.items() if a.node_id == victim_id and not n.startswith("SERVE_"))
    assert any(n.startswith("worker:") for n in moved)

    # What was acknowledged before the kill: result batches by every rollout worker, snapshots by every learner.
    worker_names = [n for n in actors if n.startswith("worker:")]

    seen = {}

    def every_worker_acked():  # a loaded machine may start a worker's loop after the pool has snapshots
        seen.update({n: ray.get(ray.get_actor(n, namespace="league").get_stats.remote(), timeout=30)
                     for n in worker_names})
        return dict(seen) if all(seen[n]["results_acked"] > 0 for n in worker_names) else None
    try:
        acked = wait_for(every_worker_acked, timeout=120, what="result batches acknowledged by every rollout worker")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the workers' stats: {seen}") from None
    snapshots = set()
    for name in (n for n in actors if n.startswith("learner:")):
        snapshots |= set(ray.get(ray.get_actor(name, namespace="league").info.remote(), timeout=60)["snapshots_acked"])
    snapshots |= {a["agent_id"] for a in ray.get(coordinator().pool.remote(), timeout=30)}

    kill_node(cluster["workers"][victim_id])
    killed_at = status()["games"]

    def restarted():
        now = actors_by_name()
        return all(n in now and now[n].node_id == survivor_id for n in moved) and any(
            r.node_id == survivor_id for r in replicas())
    wait_for(restarted, timeout=180, what=f"{moved} restarted on the surviving node")
    wait_for(lambda: status()["games"] > killed_at + 2000, timeout=90, what="games after the node loss")

    # The coordinator itself, killed, restarts on the storage node and the league goes on from the store.
    old_pid, before = actors_by_name()["coordinator"].pid, status()["games"]
    ray.kill(coordinator(), no_restart=False)
    back = wait_for(lambda: (lambda c: c if c.pid != old_pid and status()["games"] > before + 1000 else None)(
        actors_by_name()["coordinator"]), timeout=120, what="the coordinator back with the league going on")
    assert back.node_id == cluster["head"]

    # stopped now rather than at its budget: the launcher flushes, exits 0 and the job succeeds
    interrupt_launcher(cluster["storage"])
    assert job["proc"].wait(timeout=240) == 0, open(job["log"]).read()[-3000:]
    out = open(job["log"]).read()
    assert "stopped; the league is in" in out and f"storage {cluster['storage']}" in out
    assert "succeeded" in out  # what `ray job submit` says of the job
    with LeagueStore(cluster["storage"], create=False) as store:
        for name, s in acked.items():
            ((batches, games),) = store._query("SELECT count(*), coalesce(sum(n), 0) FROM results "
                                               "WHERE source = ? AND seq > ? AND seq <= ?",
                                               (name, s["first_seq"], s["last_acked_seq"]))
            assert batches == s["results_acked"], name
            assert games == s["games_acked"], name
        loaded = sum(1 for agent in snapshots if policy_from_bytes(store.snapshot_blob(agent)) is not None)
        assert loaded == len(snapshots)
        assert store.latest_nash() is not None
    # the store directory holds the league file and SQLite's own files, nothing another process left
    assert {p.name for p in cluster["storage"].iterdir()} <= {"league.db", "league.db-wal", "league.db-shm"}
