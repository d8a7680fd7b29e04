"""How far a panel's members agree over a run, and how each of them rates.

A run's votes are a rows × members matrix of "yes", "no" or None (no answer). Fleiss' kappa
needs every row rated by the same number of members, so it is computed over the rows every member
answered; pairwise agreement over the rows both members of a pair answered. The interval of kappa
is a 95% percentile bootstrap over those rows.

With advisory members (judges/panel/votes.py), each member's rate and every pair's agreement
cover all members, advisory ones included; Fleiss' kappa, the decided rows and the one-vote
share are the voting members' (the panel that decides the verdicts), and `kappa_raters` says how
many members that is.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from itertools import combinations

import numpy as np

from judges.panel.votes import NO, YES, panel_vote, voters

RESAMPLES = 1000
_CATEGORIES = (YES, NO)
# Resampled rows drawn per block: bounds the memory of one block to a few tens of MB.
_DRAWS_PER_BLOCK = 1_000_000


def category_counts(votes: Sequence[Sequence[str | None]],
                    categories: Sequence[str] = _CATEGORIES) -> np.ndarray:
    """Rows × categories counts of the members' answers (errors not counted).

    Yes/no by default; a head-to-head panel's are A, B and tie (judges/panel/pairs.py).
    """
    return np.array([[sum(v == c for v in row) for c in categories] for row in votes],
                    dtype=np.int64).reshape(-1, len(categories))


def _fleiss(counts: np.ndarray) -> np.ndarray:
    """Fleiss' kappa of each rows × categories table in a (..., rows, k) stack; NaN if undefined.

    With N rows, n raters a row and p_j the share of all ratings in category j:
    P_i = (Σ_j n_ij² − n) / (n(n − 1)), P̄ the mean of P_i, P_e = Σ_j p_j²,
    kappa = (P̄ − P_e) / (1 − P_e), undefined when P_e = 1 (every rating in one category).
    """
    counts = np.asarray(counts, dtype=float)
    rows = counts.shape[-2]
    raters = counts[..., 0, :].sum(axis=-1)  # the same in every row
    per_row = ((counts ** 2).sum(axis=-1) - raters[..., None]) / (
        raters[..., None] * (raters[..., None] - 1))
    observed = per_row.mean(axis=-1)
    shares = counts.sum(axis=-2) / (rows * raters[..., None])
    chance = (shares ** 2).sum(axis=-1)
    undefined = np.isclose(chance, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = (observed - chance) / np.where(undefined, 1.0, 1.0 - chance)
    return np.where(undefined, np.nan, kappa)


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """Fleiss' kappa of a rows × categories count table, every row with the same total ≥ 2.

    Returns:
        Kappa; None for no rows, or when every rating fell in one category.
    """
    counts = np.asarray(counts)
    if len(counts) == 0:
        return None
    totals = counts.sum(axis=1)
    if totals.min() != totals.max() or totals[0] < 2:
        raise ValueError("Fleiss' kappa needs the same number (at least 2) of ratings a row")
    # In exact integers and fractions, rounded once: the published figure is the definition's
    # number itself, not a float sum's neighbour (the bootstrap's resamples stay in floats).
    rows, raters = len(counts), int(totals[0])
    squares = sum(int(c) ** 2 for c in counts.ravel())
    observed = Fraction(squares - rows * raters, rows * raters * (raters - 1))
    chance = Fraction(sum(int(c) ** 2 for c in counts.sum(axis=0)), (rows * raters) ** 2)
    return None if chance == 1 else float((observed - chance) / (1 - chance))


def fleiss_interval(counts: np.ndarray, *, seed: int = 0, resamples: int = RESAMPLES
                    ) -> tuple[float | None, float | None]:
    """The 95% percentile bootstrap interval of Fleiss' kappa, resampling rows."""
    counts = np.asarray(counts)
    n = len(counts)
    if n == 0:
        return None, None
    rng = np.random.default_rng(seed)
    block = max(1, _DRAWS_PER_BLOCK // n)
    kappas = []
    for start in range(0, resamples, block):
        draws = rng.integers(0, n, size=(min(block, resamples - start), n))
        kappas.append(_fleiss(counts[draws]))
    values = np.concatenate(kappas)
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return None, None
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def voters_kappa(complete: Sequence[Sequence[str]], members: Sequence[str],
                 voting: Sequence[bool] | None, categories: Sequence[str] = _CATEGORIES, *,
                 seed: int = 0, resamples: int = RESAMPLES) -> dict:
    """Fleiss' kappa over the voting members' rows every one of them answered.

    With its interval, how many rows and raters it rests on, and which members did not vote
    (advisory), for yes/no rows and pairs alike.
    """
    counted = voters(members, members, voting)[1]
    counts = category_counts(complete, categories)
    kappa = fleiss_kappa(counts) if len(counted) >= 2 and complete else None
    low, high = (fleiss_interval(counts, seed=seed, resamples=resamples)
                 if kappa is not None else (None, None))
    return {"kappa": kappa, "kappa_lower": low, "kappa_upper": high,
            "kappa_rows": len(complete) if len(counted) >= 2 else 0,
            "kappa_raters": len(counted), "advisory": [m for m in members if m not in counted]}


def panel_stats(votes: Sequence[Sequence[str | None]], members: Sequence[str],
                voting: Sequence[bool] | None = None, *, seed: int = 0,
                resamples: int = RESAMPLES) -> dict:
    """A panel's figures over a run (`voting`: per member, False when advisory).

    Returns:
        members: per member, its yes rate over the rows it answered, rated and error counts;
        advisory: the members that do not vote;
        agreement: per pair of members ("a|b"), the share of rows both answered on which they
            agree, and how many rows that is;
        kappa, kappa_lower, kappa_upper, kappa_rows, kappa_raters: Fleiss' kappa of the voting
            members over the rows every one of them answered, its interval, that row count and
            how many members it is over (None when fewer than two vote);
        decided_rows, one_vote_rows, one_vote_share: rows the panel decided, those decided by a
            single vote, and their share of the decided rows.
    """
    votes = [list(row) for row in votes]
    per_member = {}
    for index, member in enumerate(members):
        answers = [row[index] for row in votes if row[index] is not None]
        yes = sum(a == YES for a in answers)
        per_member[member] = {"rate": yes / len(answers) if answers else None,
                              "rated": len(answers), "errors": len(votes) - len(answers)}
    agreement = {}
    for (i, a), (j, b) in combinations(enumerate(members), 2):
        both = [(row[i], row[j]) for row in votes if row[i] is not None and row[j] is not None]
        agreement[f"{a}|{b}"] = {"agreement": (sum(x == y for x, y in both) / len(both)
                                               if both else None), "rows": len(both)}
    raters = [voters(row, members, voting)[0] for row in votes]
    complete = [row for row in raters if all(v is not None for v in row)]
    decided = [vote for vote in (panel_vote(row, members, voting) for row in votes)
               if vote.rating is not None]
    one_vote = sum(vote.by_one_vote for vote in decided)
    return {"members": per_member, "agreement": agreement,
            **voters_kappa(complete, members, voting, seed=seed, resamples=resamples),
            "decided_rows": len(decided), "one_vote_rows": one_vote,
            "one_vote_share": one_vote / len(decided) if decided else None}
