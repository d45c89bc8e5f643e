"""league/seeds.py: a run's random streams derive from run.seed, the same in every process."""

import subprocess
import sys

import numpy as np
import pytest

from league.seeds import generator, seed_int, seed_sequence


def test_streams_are_fixed_functions_of_the_seed_and_path():
    a = generator(7, "worker", "worker:main_agent-0:0").random(4)
    np.testing.assert_array_equal(a, generator(7, "worker", "worker:main_agent-0:0").random(4))
    assert not np.array_equal(a, generator(8, "worker", "worker:main_agent-0:0").random(4))
    assert not np.array_equal(a, generator(7, "worker", "worker:main_agent-0:1").random(4))
    assert seed_int(7, "learner", "main_agent-0") != seed_int(7, "learner", "main_exploiter-0")
    assert 0 <= seed_int(7, "x") < 2**63 and seed_int(7, "x", bits=31) < 2**31


def test_streams_do_not_depend_on_the_process_hash_salt():
    """Python salts str hashes per process (what hash((seed, learner_id)) did wrong):
    two interpreters with different PYTHONHASHSEED must agree on every seed."""
    code = "from league.seeds import seed_int; print(seed_int(3, 'learner', 'main_agent-0'))"
    out = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONHASHSEED": salt, "PYTHONPATH": "."}).stdout for salt in ("1", "2")}
    assert out == {f"{seed_int(3, 'learner', 'main_agent-0')}\n"}


@pytest.mark.parametrize("bad", [-1, 1.5, "7", True])
def test_a_bad_run_seed_is_refused(bad):
    with pytest.raises(ValueError, match="run.seed"):
        seed_sequence(bad, "x")


def test_config_refuses_a_negative_seed(tmp_path):
    from league.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="run.seed"):
        load_config(None, [f"run.storage={tmp_path}", "run.seed=-3"])
