"""The kinds of measurement the league records, and the quality it shows, each named once.

A measurement is a row of the store's ``measurements`` table (``LeagueStore.add_measurement``):
a kind, a time, a value and its data. The kinds are strings in existing stores, so their values
never change; code names them through these constants, never by the bare string.

The coordinator's quality (``GET /status``, ``/nash``, the progress line, the metrics) is the
latest measurement of each kind in ``QUALITY``, under its key there, and the anchors' scores
under ``ANCHORS`` (``{subject: {anchor: m}, ELO: {subject: m}}``).
"""

from __future__ import annotations

# -- kinds ------------------------------------------------------------------------------
NASH_CONV = "nash_conv"  # exact NashConv of the published mixture (actors.evaluator)
META_NASH_CONV = "meta_nash_conv"  # the meta-game Nash's, measured beside a published LP mixture
PROBE = "probe_br_return"  # a trained best response's return against the published mixture (actors.prober)
OBJECTIVE = "objective"  # a learner's outcome novelty across its k opponents (actors.learner)
TEAM_TRACE = "team_trace"  # the survivors trace of the published mixture in a team game (actors.anchor_judge)
ANCHOR = "anchor"  # prefix of the anchor scores: anchor:<subject>:<anchor> (league.anchors)
ANCHOR_ELO = "anchor_elo"  # prefix of the anchored ratings: anchor_elo:<subject>

# the anchor judge's subjects: the published mixture, the same searching (search.simulations > 0),
# the newest snapshot of the main role
PUBLISHED = "published"
PUBLISHED_SEARCH = "published_search"
NEWEST_MAIN = "newest_main"
SUBJECTS = (PUBLISHED, PUBLISHED_SEARCH, NEWEST_MAIN)


def anchor_score_kind(subject: str, anchor: str) -> str:
    """The measurement kind of ``subject``'s score against ``anchor``."""
    return f"{ANCHOR}:{subject}:{anchor}"


def anchor_elo_kind(subject: str) -> str:
    """The measurement kind of ``subject``'s anchored Elo rating."""
    return f"{ANCHOR_ELO}:{subject}"


# -- the quality a status shows: its key -> the kind it is the latest of ----------------
PROBE_QUALITY = "probe"
QUALITY = {NASH_CONV: NASH_CONV, META_NASH_CONV: META_NASH_CONV, PROBE_QUALITY: PROBE, TEAM_TRACE: TEAM_TRACE}
ANCHORS = "anchors"  # the key of the anchors' scores
ELO = "elo"  # under ANCHORS: each subject's anchored rating
