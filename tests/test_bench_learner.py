"""bench/learner.py without Ray: the rollouts it times are what workers send (whole episodes,
legal actions), and each minibatch size runs the update the config's PPO would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import learner
from bench.nets import positions
from policies.rollout import Rollout

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_pieces_are_whole_episodes_of_legal_moves_that_concat_back_to_the_batch():
    obs, mask = positions("connect_four", 1000)
    pieces = learner.rollout_pieces(obs, mask, 4)
    assert len(pieces) == 4
    assert all(p.dones[-1] for p in pieces)  # a learner trains on complete episodes only
    whole = Rollout.concat(pieces)
    assert len(whole) == 1000 and np.array_equal(whole.obs, obs)
    assert whole.mask[np.arange(1000), whole.actions].all()  # every action legal where it was taken
    ends = np.flatnonzero(whole.dones)
    assert np.all(whole.rewards[ends] != 0) and np.all(np.delete(whole.rewards, ends) == 0)


def test_each_minibatch_size_times_the_configs_update():
    out = learner.bench(str(ROOT / "configs" / "connect_four_ppo.yaml"), ["rollout.steps_per_batch=600"], "cpu",
                        [128, 600], updates=1)
    assert out["decisions_per_update"] == 600 and out["device"] == "cpu" and out["epochs"] == 4
    assert [r["minibatch_size"] for r in out["rows"]] == [128, 600]
    # the steps ppo_update took: the config's 4 epochs of ceil(600 / size) minibatches each
    assert [r["minibatches_per_update"] for r in out["rows"]] == [4 * 5, 4 * 1]
    for r in out["rows"]:
        assert r["ms_total"] == pytest.approx(sum(r["ms"].values()), abs=0.02)
        assert r["decisions_per_s"] == pytest.approx(600 / (r["ms_total"] / 1e3), rel=0.01)


def test_bad_options_are_refused_with_the_option_named():
    bad = [(["--updates", "0"], "--updates"), (["--set", "ppo.epochs=0"], "ppo.epochs")]
    if not torch.cuda.is_available():
        bad.append((["--device", "cuda"], "no CUDA device"))
    for argv, named in bad:
        out = subprocess.run([sys.executable, "-m", "bench.learner", *argv], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
        assert out.returncode == 2 and named in out.stderr, out.stderr
