"""The judge drift canary: tonight's judge against the baseline's own verdicts.

A regression compares tonight's candidate with the baseline's verdicts, so it means something
only if the judge still judges as it did then. Providers update a model behind the same name,
and a prompt, endpoint or temperature change moves verdicts too. The canary re-judges a fixed,
seeded sample of the baseline's rows (the baseline's responses, not tonight's) with tonight's
judge, never from the reply cache, and compares each yes/no verdict with the one the baseline
published: agreement, Cohen's kappa, flips both ways and the exact McNemar p.

Every LLM judge is checked, verdict by verdict: a per-chunk judge on each chunk, a per-turn
judge on each turn, an answer, agent or session judge on each row. An LLM judge a gate depends
on that the canary could not check (the baseline has none of its verdicts) leaves the night
incomplete, named (`unchecked_reasons`).

The pairwise judge of a regression's head-to-head (a judge spec whose unit is a pair,
judges/builtin/pairwise.py) is no judge of the run's plan: when a gate reads a
pairwise figure (`winrate`), the canary re-judges a seeded sample of the baseline's own
head-to-head pairs (its `baseline/response` against its response), both orders, and compares
each reconciled verdict (A, B or tie) with the one the baseline published (`pair_agreement`).
A baseline without head-to-head verdicts (an evaluate run) has none to drift from: tonight's
head-to-head judges both sides with tonight's judge, so nothing of it is compared with an
earlier verdict; the section says the pairwise judge was not checked, and why.

The rule is agreement, per judge: a judge that agrees with its own earlier verdicts on fewer
than `min_agreement` of the sampled rows (0.9 by default) has drifted, and the night is
incomplete, never a pass or a breach. Why 0.9 and 50 rows: see docs/regression.md ("Judge drift").
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from typing import Any, TypeVar

import numpy as np

from judges.base import JudgeSpec
from judges.builtin.pairwise import PAIRWISE_JUDGE
from judges.calibration.stats import cohen_kappa
from judges.names.metric_fields import member_verdict, unit_verdicts
from judges.names.pairwise_fields import member_pair_verdict
from judges.result_names.panel import panel_base
from tasks.regression.paired_stats import mcnemar

T = TypeVar("T")

DEFAULT_CANARY_ROWS = 50
DEFAULT_MIN_AGREEMENT = 0.9
YES_NO = ("yes", "no")
DRIFTED = "the judge drifted"  # how a drift reason starts (the others: could not check)


PER_UNIT_MODES = ("per_chunk", "per_turn")
PAIR_VERDICTS = ("A", "B", "tie")
PAIRWISE_CANARY_NAME = "the pairwise judge (head-to-head)"


def canary_judges(judges: Iterable[JudgeSpec]) -> list[JudgeSpec]:
    """The judges a canary checks: every judge a model decides (no deterministic one)."""
    return [j for j in judges if j.mode != "deterministic"]


def baseline_verdicts(record: Mapping[str, Any], judge: JudgeSpec) -> list[str | None]:
    """The judge's published verdicts on a baseline row: one per row, chunk or turn."""
    return unit_verdicts(record, judge.prefix, judge.mode in PER_UNIT_MODES)


def unit_pairs(before: Sequence[str | None], now: Sequence[str | None]
               ) -> list[tuple[str, str | None]]:
    """(baseline verdict, tonight's or None when it failed) for each unit rated in the baseline.

    Units are the row's chunks or turns in order, the same row judged twice: a unit the
    baseline did not rate is left out, one tonight failed on is an error.
    """
    return [(b, n if n in YES_NO else None)
            for b, n in zip(before, list(now) + [None] * (len(before) - len(now)), strict=False)
            if b in YES_NO]


def unchecked_reasons(needed: Iterable[JudgeSpec], agreements: Sequence[JudgeAgreement]
                      ) -> list[str]:
    """A sentence per LLM judge a gate depends on that the canary did not check at all."""
    checked = {a.prefix for a in agreements if a.compared + a.errors}
    return [f"the judge drift canary did not check {j.name}: none of the baseline's sampled "
            "rows has its verdicts, so a gate on it cannot tell the judge's drift from the "
            "candidate's change" for j in needed if j.prefix not in checked]


class MemberMoves:
    """A panel's members of answer judges, each against its own verdicts in an earlier run.

    For rejudge: what each member said is kept per row as the source run is read, and paired
    with what it says now as the new rows come.
    """

    def __init__(self, judges: Sequence[JudgeSpec], members: Sequence[str]):
        self.judges = ([j for j in judges if j.mode == "answer" and j.samples == 1]
                       if len(members) > 1 else [])
        self.members = list(members)
        self.pairs: dict[tuple[str, int], list[tuple[str, str | None]]] = {}

    def kept(self, record: Mapping[str, Any]) -> dict[tuple[str, int], tuple[Any, str | None]]:
        """What the rejudge needs of a source row: each member's model and yes/no verdict."""
        return {(j.prefix, n): member_verdict(record, j.prefix, n)
                for j in self.judges for n in range(1, len(self.members) + 1)}

    def add(self, kept: Mapping[Any, Any], record: Mapping[str, Any]) -> None:
        """Pair a new row's member verdicts with the source row's.

        Only where the same model gave a yes/no verdict then; None now: it failed on the row.
        """
        for judge in self.judges:
            for number, model in enumerate(self.members, start=1):
                then_model, before = kept.get((judge.prefix, number)) or (None, None)
                now_model, now = member_verdict(record, judge.prefix, number)
                if before is not None and then_model == now_model == model:
                    self.pairs.setdefault((judge.prefix, number), []).append((before, now))

    def agreements(self) -> list[JudgeAgreement]:
        """One line per member compared, named and placed as the canary's member lines."""
        return [dataclass_replace(agreement_of(judge, found),
                                  name=f"{judge.name} panel member {number} ({model})",
                                  prefix=panel_base(judge.prefix, number))
                for judge in self.judges
                for number, model in enumerate(self.members, start=1)
                if (found := self.pairs.get((judge.prefix, number)))]


def unchecked_member_reasons(needed: Iterable[JudgeSpec], members: Sequence[str],
                             agreements: Sequence[JudgeAgreement]) -> list[str]:
    """A sentence per panel member of a gated answer judge that the canary did not check.

    Members are compared one by one where the judge asks once a row (`member_agreements`); a
    judge of chunks, turns or samples is checked as a whole.

    The baseline's sampled rows hold none of that member's own verdicts (it failed on all of
    them, or another model had its place). A member's drift hides behind a steady majority, so
    a member the canary cannot see is a gate it cannot vouch for.

    Args:
        needed: the LLM judges a gate depends on.
        members: tonight's panel, one model per member in order (one model: no panel).
        agreements: what the canary compared, judges and members.
    """
    if len(members) < 2:
        return []
    checked = {a.prefix for a in agreements if a.compared + a.errors}
    return [f"the judge drift canary did not check {j.name} panel member {number} ({model}): "
            "none of the baseline's sampled rows has that member's own verdicts, so its drift "
            "cannot be told from the candidate's change"
            for j in needed if j.mode == "answer" and j.samples == 1 and j.prefix in checked
            for number, model in enumerate(members, start=1)
            if panel_base(j.prefix, number) not in checked]


def sample_key(seed: int, request_id: str) -> str:
    """A row's place in the seeded order: the same rows are drawn every night for a baseline."""
    return hashlib.sha256(f"{seed}\x00{request_id}".encode()).hexdigest()


def choose_rows(records: Iterable[Mapping[str, Any]], judges: Sequence[JudgeSpec], size: int,
                seed: int) -> list[Mapping[str, Any]]:
    """Published records with a yes/no verdict (of a row, chunk or turn) of `judges`.

    For each judge, the first `size` records with its verdicts in the seeded order
    (`sample_key`): a judge of a few rows of a mixed set (sessions among answers) gets its own
    sample, not what is left of the others'. See `first_per_judge`.
    """
    return first_per_judge(
        records, judges, size, seed,
        judged=lambda record, judge: any(v in YES_NO for v in baseline_verdicts(record, judge)),
        request_id=lambda record: str(record.get("request_id")))


def first_per_judge(items: Iterable[T], judges: Sequence[JudgeSpec], size: int, seed: int,
                    judged: Callable[[T, JudgeSpec], bool], request_id: Callable[[T], str]
                    ) -> list[T]:
    """For each judge, the first `size` items it judged in the seeded order; their union.

    Kept in bounded memory (at most `size` per judge) as the items stream by, returned in that
    order. The canary draws baseline records with it, the estimate (flows/preflight/budget.py)
    the set's rows, so that both count the same rows.
    """
    kept: dict[str, list[tuple[str, int, T]]] = {j.prefix: [] for j in judges}
    for position, item in enumerate(items):
        entry: tuple[str, int, T] | None = None
        for judge in judges:
            if not judged(item, judge):
                continue
            if entry is None:
                entry = (_negated(sample_key(seed, request_id(item))), position, item)
            heap = kept[judge.prefix]  # a max-heap by key, via negation
            if len(heap) < size:
                heapq.heappush(heap, entry)
            elif entry[:2] > heap[0][:2]:
                heapq.heapreplace(heap, entry)
    union = {entry[1]: entry for heap in kept.values() for entry in heap}
    return [item for _, _, item in sorted(union.values(), key=lambda e: e[:2], reverse=True)]


def choose_pairs(records: Iterable[Mapping[str, Any]], size: int, seed: int,
                 verdict_field: str, baseline_field: str) -> list[Mapping[str, Any]]:
    """The first `size` baseline records with a head-to-head verdict, in the seeded order.

    Only records whose verdict is A, B or tie and that kept the response they were compared
    with count: the same pairs are drawn every night for a baseline, in bounded memory.
    """
    judged = (r for r in records if r.get(verdict_field) in PAIR_VERDICTS
              and isinstance(r.get(baseline_field), str))
    return heapq.nsmallest(size, judged,
                           key=lambda r: sample_key(seed, str(r.get("request_id"))))


def pair_agreement(pairs: Sequence[tuple[str, str | None]]) -> JudgeAgreement:
    """Agreement of (baseline's verdict, tonight's or None) over head-to-head pairs.

    A verdict agrees when it is the same of A, B and tie; kappa is over the three; the flips
    and McNemar's p are of "the candidate (B) won" (yes) against anything else (no).
    """
    compared = [(before, now) for before, now in pairs if now in PAIR_VERDICTS]
    matrix = np.zeros((3, 3), dtype=np.int64)
    for before, now in compared:
        matrix[PAIR_VERDICTS.index(now), PAIR_VERDICTS.index(before)] += 1
    won_before = [b == "B" for b, _ in compared]
    won_now = [n == "B" for _, n in compared]
    return JudgeAgreement(
        PAIRWISE_CANARY_NAME, PAIRWISE_JUDGE.prefix, len(compared),
        sum(b == n for b, n in compared),
        sum(b and not n for b, n in zip(won_before, won_now, strict=True)),
        sum(n and not b for b, n in zip(won_before, won_now, strict=True)),
        sum(now not in PAIR_VERDICTS for _, now in pairs),
        cohen_kappa(matrix) if compared else None, mcnemar(won_before, won_now).p_two_sided)


def pair_member_agreements(records: Sequence[Mapping[str, Any]],
                           verdicts: Sequence[Any]) -> list[JudgeAgreement]:
    """A head-to-head panel's members, each against its own pair verdicts in the baseline.

    So that one member drifting cannot hide behind a steady majority. A member is compared
    only where the baseline's member of the same number was the same model.

    Args:
        records: the baseline's sampled records with head-to-head verdicts.
        verdicts: tonight's PairVerdicts of those pairs, in the same order.
    """
    pairs: dict[tuple[int, str], list[tuple[str, str | None]]] = {}
    for record, verdict in zip(records, verdicts, strict=True):
        for number, member in enumerate(verdict.members, start=1):
            model, before = member_pair_verdict(record, number)
            if model != member.model or before not in PAIR_VERDICTS:
                continue
            now = member.verdict if member.verdict in PAIR_VERDICTS else None
            pairs.setdefault((number, member.model), []).append((before, now))
    return [dataclass_replace(pair_agreement(found),
                              name=f"{PAIRWISE_CANARY_NAME} panel member {number} ({model})",
                              prefix=f"{PAIRWISE_JUDGE.prefix}/panel/{number}")
            for (number, model), found in sorted(pairs.items())]


def _negated(key: str) -> str:
    """A key that sorts in reverse (hex digits complemented), for a max-heap on heapq."""
    return key.translate(str.maketrans("0123456789abcdef", "fedcba9876543210"))


@dataclass(frozen=True)
class JudgeAgreement:
    """How one judge's verdicts tonight compare with its verdicts in the baseline."""

    name: str
    prefix: str
    compared: int  # rows rated yes/no both times
    agreed: int
    yes_to_no: int
    no_to_yes: int
    errors: int  # sampled rows the judge failed on tonight
    kappa: float | None
    mcnemar_p: float | None

    @property
    def agreement(self) -> float | None:
        """Share of the compared rows with the same verdict both times."""
        return self.agreed / self.compared if self.compared else None

    def as_dict(self) -> dict[str, Any]:
        """The manifest's entry for this judge."""
        return {"name": self.name, "prefix": self.prefix, "compared": self.compared,
                "agreed": self.agreed, "agreement": self.agreement,
                "yes_to_no": self.yes_to_no, "no_to_yes": self.no_to_yes,
                "errors": self.errors, "kappa": self.kappa, "mcnemar_p": self.mcnemar_p}


def agreement_of(judge: JudgeSpec, pairs: Sequence[tuple[str, str | None]]) -> JudgeAgreement:
    """Agreement of (baseline verdict, tonight's verdict or None if it failed) pairs."""
    compared = [(before, now) for before, now in pairs if now in YES_NO]
    errors = sum(now is None for _, now in pairs)
    before = [b == "yes" for b, _ in compared]
    now = [n == "yes" for _, n in compared]
    matrix = np.zeros((2, 2), dtype=np.int64)
    for b, n in zip(before, now, strict=True):
        matrix[int(n), int(b)] += 1
    test = mcnemar(before, now)
    return JudgeAgreement(
        judge.name, judge.prefix, len(compared),
        sum(b == n for b, n in zip(before, now, strict=True)),
        sum(b and not n for b, n in zip(before, now, strict=True)),
        sum(n and not b for b, n in zip(before, now, strict=True)), errors,
        cohen_kappa(matrix) if compared else None, test.p_two_sided)


def member_agreements(judge: JudgeSpec, records: Sequence[Mapping[str, Any]],
                      results: Sequence[Any]) -> list[JudgeAgreement]:
    """A panel's members, each against its own verdicts in the baseline.

    So that one member drifting cannot hide behind a steady majority. For an answer judge
    asked once a row; a member is compared only where the baseline's member of the same number
    was the same model (judges/result_names/ `panel_row_fields`).

    Args:
        judge: the judge.
        records: the baseline's sampled rows (results.jsonl records).
        results: tonight's RowResults of those rows, in the same order.
    """
    pairs: dict[tuple[int, str], list[tuple[str, str | None]]] = {}
    for record, result in zip(records, results, strict=True):
        now = next((r for r in result.judges if r.spec.prefix == judge.prefix), None)
        if now is None or not now.applied or judge.mode != "answer" or len(now.ballots) != 1:
            continue
        for number, vote in enumerate(now.ballots[0], start=1):
            model, before = member_verdict(record, judge.prefix, number)
            if model != vote.model:
                continue
            pairs.setdefault((number, vote.model or ""), []).extend(
                unit_pairs([before], [vote.rating]))
    out = []
    for (number, model), found in sorted(pairs.items()):
        agreement = agreement_of(judge, found)
        out.append(dataclass_replace(agreement, name=f"{judge.name} panel member {number} "
                                     f"({model})", prefix=panel_base(judge.prefix, number)))
    return out


def drift_reasons(agreements: Sequence[JudgeAgreement], min_agreement: float,
                  max_error_share: float) -> list[str]:
    """One sentence per judge that drifted or could not be checked (empty: no drift seen)."""
    reasons = []
    for a in agreements:
        asked = a.compared + a.errors
        if asked and a.errors / asked > max_error_share:
            reasons.append(
                f"the judge drift canary could not check {a.name}: it failed on {a.errors} of "
                f"{asked} of the baseline's rows")
        elif a.compared and a.agreed / a.compared < min_agreement:
            reasons.append(
                f"{DRIFTED}: {a.name} agrees with the baseline's own verdicts on "
                f"{a.agreed} of {a.compared} rows ({a.agreed / a.compared:.0%}, below "
                f"{min_agreement:.0%}); flips yes→no {a.yes_to_no}, no→yes {a.no_to_yes}, "
                f"McNemar p {_p(a.mcnemar_p)}; re-judge the baseline with tonight's judge "
                "(judgeflow rejudge ... --as-baseline) to adopt it on purpose")
    return reasons


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
