"""A panel's names: each member's verdicts on a row and the panel's figures over a run.

Member n is the n-th model of the judge's comma list (the manifest's judge.members names them),
published under `{prefix}/panel/{n}/`; the panel's own figures under `{prefix}/panel/`. An
advisory member (asked and published, but not voting) has `{prefix}/panel/{n}/advisory` true on
its rows and in the run's figures; a voting member has no such field. Fleiss' kappa is the
voting members', `…/fleiss_kappa_raters` of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations
from typing import Any

from judges.result_names.counts import count_names
from judges.results import JudgeResult


def panel_base(prefix: str, member: int) -> str:
    """Where a panel's member (numbered from 1, in the judge model's comma list) is published."""
    return f"{prefix}/panel/{member}"


def panel_row_fields(result: JudgeResult) -> dict:
    """Each panel member's model and verdict on the row.

    An answer judge asked once: `{prefix}/panel/{n}/model|rating|rationale|error_message`.
    Asked several times (samples, chunks, turns): `…/ratings|rationales|error_messages`, one
    per prompt the panel was asked, in `ballots` order.
    """
    out: dict = {}
    single = len(result.ballots) == 1 and result.spec.mode == "answer"
    for index, model in enumerate((v.model for v in result.ballots[0]), start=1):
        base = panel_base(result.spec.prefix, index)
        votes = [ballot[index - 1] for ballot in result.ballots]
        out[f"{base}/model"] = model
        if result.ballots[0][index - 1].advisory:
            out[f"{base}/{ADVISORY}"] = True
        if single:
            out |= {f"{base}/rating": votes[0].rating, f"{base}/rationale": votes[0].rationale,
                    f"{base}/error_message": votes[0].error}
        else:
            out |= {f"{base}/ratings": [v.rating for v in votes],
                    f"{base}/rationales": [v.rationale for v in votes],
                    f"{base}/error_messages": [v.error for v in votes]}
    return out


# A panel's figures beside its judge's (judges/panel/agreement.py `panel_stats`); member n is
# the n-th model of the judge's comma list (the manifest's judge.members names them). Over the
# panel's votes: one per prompt asked (the row, each sample, chunk or turn).
PANEL_KAPPA = "fleiss_kappa"
PANEL_ONE_VOTE = "one_vote_share"
ADVISORY = "advisory"  # a member's flag: asked and published, but it does not vote


def panel_metrics(prefix: str, members: tuple[str, ...], stats: Mapping[str, Any]) -> dict:
    """A panel's figures under `{prefix}/panel/`.

    Each member's yes rate and counts, each pair's agreement, Fleiss' kappa with its 95%
    interval and row count, and the share of decided votes won by one vote.
    """
    out: dict[str, float | int | None] = {}
    for number, model in enumerate(members, start=1):
        base, figures = panel_base(prefix, number), stats["members"][model]
        rated, errors = count_names(base)
        out |= {f"{base}/rate": figures["rate"], rated: figures["rated"],
                errors: figures["errors"]}
        if model in stats.get("advisory", ()):
            out[f"{base}/{ADVISORY}"] = True
    out |= _agreement_fields(f"{prefix}/panel", members, stats)
    return out | _one_vote_fields(f"{prefix}/panel", stats)


# A head-to-head panel's figures (judges/panel/pairs.py `pair_panel_stats`), beside the run's
# own win rates: member n's win rate over the pairs it decided, agreement and kappa over A/B/tie,
# and the share of decided pairs won by a single vote.
PAIR_PANEL = "pairwise/panel"


def pair_panel_metrics(members: tuple[str, ...], stats: Mapping[str, Any]) -> dict:
    """A head-to-head panel's figures under `pairwise/panel/`."""
    out: dict[str, float | int | None] = {}
    for number, model in enumerate(members, start=1):
        base, figures = f"{PAIR_PANEL}/{number}", stats["members"][model]
        rated, errors = count_names(base)
        out |= {f"{base}/winrate": figures["b_share"],
                f"{base}/decided_count": figures["decided"], rated: figures["rated"],
                errors: figures["errors"]}
        if model in stats.get("advisory", ()):
            out[f"{base}/{ADVISORY}"] = True
    return out | _agreement_fields(PAIR_PANEL, members, stats) | _one_vote_fields(PAIR_PANEL,
                                                                                  stats)


def _one_vote_fields(base: str, stats: Mapping[str, Any]) -> dict:
    """The share of decided votes (rows, prompts or pairs) won by a single vote, and counts."""
    return {f"{base}/{PANEL_ONE_VOTE}": stats["one_vote_share"],
            f"{base}/one_vote_count": stats["one_vote_rows"],
            f"{base}/decided_count": stats["decided_rows"]}


def _agreement_fields(base: str, members: tuple[str, ...], stats: Mapping[str, Any]) -> dict:
    """Each pair of members' agreement, and Fleiss' kappa with its interval, under `base`."""
    out: dict[str, float | int | None] = {}
    for (i, a), (j, b) in combinations(enumerate(members, start=1), 2):
        pair = stats["agreement"][f"{a}|{b}"]
        out |= {f"{base}/{i}-{j}/agreement": pair["agreement"],
                f"{base}/{i}-{j}/agreement_count": pair["rows"]}
    kappa = f"{base}/{PANEL_KAPPA}"
    return out | {kappa: stats["kappa"], f"{kappa}_lower": stats["kappa_lower"],
                  f"{kappa}_upper": stats["kappa_upper"], f"{kappa}_count": stats["kappa_rows"],
                  f"{kappa}_raters": stats["kappa_raters"]}
