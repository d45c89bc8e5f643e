"""The launcher's progress line: one line every ``run.progress_every_seconds`` (and one at the
stop) with the pace, the games, the pool by role, the Nash and the quality measurements."""

from __future__ import annotations

from typing import Any

from league import measures
from league.config import ROLE_CONFIGS
from league.pool import AgentType


def progress_line(status: dict[str, Any], steps_per_s: float, elapsed: float) -> str:
    """The line for the league's ``status`` (``GET /status``), its env steps per second and the
    seconds since the start."""
    by_role = status["pool_by_role"]
    mains = [(lid, l) for lid, l in status["learners"].items() if l["role"] == AgentType.main().value]
    main_txt = " ".join(
        f"{lid}: elo {l['elo']:.0f}"
        + (f" vs-nash {l['win_rate_vs_nash']:.2f}" if l.get("win_rate_vs_nash") is not None else "")
        + (f" curriculum stage {l['curriculum_stage']}" if "curriculum_stage" in l else "")
        for lid, l in mains)
    return (f"[{elapsed:7.0f}s] {steps_per_s:9.0f} env steps/s | games {status['games']:.0f} | pool "
            f"{status['pool_size']} ({', '.join(f'{c.short} {by_role[name]}' for name, c in ROLE_CONFIGS.items())}) "
            f"| nash H {abs(status['nash_entropy']):.2f} "
            f"support {status['nash_support']} | {quality_text(status)} | {main_txt}"
            + (" | STORE DISK FULL: nothing is acknowledged until space returns" if status.get("store_disk_full")
               else ""))


def quality_text(status: dict[str, Any]) -> str:
    """Meta-exploitability with what measures the mixture in the game beside it: alone it can
    read 0 for a mixture a best response beats by a wide margin."""
    q = status.get("quality") or {}
    parts = [f"meta-expl {status.get('meta_exploitability', 0.0):.3f}"]
    if "meta_game_agents" in status:  # how much of the pool the meta-game rests on
        parts[0] += f" over {status['meta_game_agents']}/{status.get('pool_size', 0)} agents"
    if measures.NASH_CONV in q:
        parts.append(f"NashConv {q[measures.NASH_CONV]['value']:.3f}")
    if measures.META_NASH_CONV in q:
        parts.append(f"(meta-Nash {q[measures.META_NASH_CONV]['value']:.3f})")
    if measures.PROBE_QUALITY in q:
        p = q[measures.PROBE_QUALITY]
        low, high = p.get("ci95", (p["value"], p["value"]))
        parts.append(f"probe BR +{p['value']:.3f} [{low:.3f}, {high:.3f}]")
    anchors = q.get(measures.ANCHORS) or {}
    if anchors.get(measures.PUBLISHED):
        scores = " ".join(f"{a} {m['value']:.2f}" for a, m in anchors[measures.PUBLISHED].items())
        elo = anchors.get(measures.ELO, {}).get(measures.PUBLISHED)
        parts.append(f"vs anchors {scores}" + (f" (anchored Elo {elo['value']:.0f})" if elo else ""))
    if anchors.get(measures.PUBLISHED_SEARCH):
        scores = " ".join(f"{a} {m['value']:.2f}" for a, m in anchors[measures.PUBLISHED_SEARCH].items())
        parts.append(f"with search {scores}")
    return " ".join(parts)
