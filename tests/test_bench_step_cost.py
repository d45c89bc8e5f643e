"""bench.step_cost: a worker's lanes against a pool of frozen opponents, without Ray. Checked for what
does not depend on timing: every setting reports, and repeating each drawn opponent over more new
episodes asks fewer distinct frozen policies per vector step."""

import json

from bench import step_cost


def test_step_cost_reports_each_setting_and_repeats_cut_the_distinct_opponents_per_step(capsys):
    assert step_cost.main(["--config", "configs/connect_four.yaml", "--repeats", "1", "16",
                           "--seconds", "0.3", "--rounds", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by = {line["setting"]: line for line in lines}
    assert set(by) == {"self_play", "league-r1", "league-r16"}
    assert by["self_play"]["distinct_opponents_per_step"] == 0.0 and by["self_play"]["ratio_to_self_play"] == 1.0
    assert all(line["env_steps_per_s"] > 0 and line["pool"] == 150 for line in lines)
    assert 0 < by["league-r16"]["distinct_opponents_per_step"] < by["league-r1"]["distinct_opponents_per_step"] / 2
