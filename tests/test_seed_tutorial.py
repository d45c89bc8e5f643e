"""The seed tutorial's "Minimal Reproducible Example", unchanged but for the import."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "data" / "league_smoke_test.py"


def test_seed_tutorial_smoke_script_passes_with_transitive_nash():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[1])
    assert out.returncode == 0, out.stderr
    assert "Smoke test PASSED" in out.stdout
    # a beats b (0.7) and c (0.6): a pure strategy, so the Nash has zero entropy.
    entropy = float(re.search(r"Nash entropy : (-?[\d.]+)", out.stdout).group(1))
    assert abs(entropy) < 1e-9
    diversity = float(re.search(r"Diversity score : ([\d.]+)", out.stdout).group(1))
    assert 0.0 < diversity < 1.0
