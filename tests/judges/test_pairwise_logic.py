"""Pure logic of the pairwise rubric judge: models, position round trips, reconcile, aggregates."""

import json
import math

import pytest
from pydantic import ValidationError

from judges.pairwise.metrics import bootstrap_winrate, pairwise_summary, pass_counts
from judges.pairwise.models import PairwiseJudgment, PositionPreference, check_rubric, parse_rubric
from judges.pairwise.reconcile import (
    Pass,
    SidePreference,
    position_to_side,
    reconcile,
    side_to_position,
    swap_positions,
    to_sides,
    weighted_scores,
)
from judges.result_names.pairwise import pair_verdict_fields as pair_record
from judges.result_names.pairwise import pairwise_metric_fields


def pairwise_metrics(verdicts, **kwargs) -> dict:
    """The published pairwise aggregates: typed summary, then names (judges/result_names/)."""
    return pairwise_metric_fields(pairwise_summary(verdicts, **kwargs))


def judgment(preference: str, *criteria: tuple[str, float, int, int]) -> PairwiseJudgment:
    """A judgment from (type, weight, score_1, score_2) tuples; one neutral criterion by default."""
    rows = criteria or (("scale", 1.0, 3, 3),)
    return PairwiseJudgment.model_validate(
        {
            "criteria": [
                {
                    "name": f"c{i}",
                    "description": "d",
                    "type": t,
                    "weight": w,
                    "score_1": s1,
                    "score_2": s2,
                }
                for i, (t, w, s1, s2) in enumerate(rows)
            ],
            "preference": preference,
            "rationale": "because",
        }
    )


def ok(order: str, preference: str, *criteria: tuple[str, float, int, int]) -> Pass:
    return Pass(order, judgment(preference, *criteria))


def failed(order: str) -> Pass:
    return Pass(order, error=f"{order} reply was not JSON")


def truthful(better: SidePreference) -> tuple[Pass, Pass]:
    """Both passes of a judge that always prefers the truly better response."""
    return tuple(Pass(o, judgment(side_to_position(better, o))) for o in ("forward", "backward"))


# --- output model -------------------------------------------------------------------------


def test_schema_forbids_extras_and_describes_every_field() -> None:
    schema = PairwiseJudgment.model_json_schema()
    for model in [schema, *schema["$defs"].values()]:
        assert model["additionalProperties"] is False
        assert all("description" in field for field in model["properties"].values())
    assert list(schema["$defs"]["CriterionScore"]["properties"]) == [
        "name", "description", "type", "weight", "score_1", "score_2",
    ]  # fmt: skip


def test_parses_the_contract_with_boolean_binary_scores() -> None:
    reply = {
        "criteria": [
            {"name": "price_validation", "description": "x", "type": "scale", "weight": 0.3,
             "score_1": 4, "score_2": 2},
            {"name": "runs", "description": "y", "type": "binary", "weight": 0.7,
             "score_1": True, "score_2": False},
        ],
        "preference": "1",
        "rationale": "r",
    }  # fmt: skip
    parsed = PairwiseJudgment.model_validate_json(json.dumps(reply))
    assert [(c.score_1, c.score_2) for c in parsed.criteria] == [(4, 2), (1, 0)]


@pytest.mark.parametrize(
    "criterion",
    [("scale", 1.0, 0, 3), ("scale", 1.0, 6, 3), ("scale", 1.0, 3, 2.5), ("binary", 1.0, 2, 0),
     ("scale", 1.0, True, 3), ("scale", -0.1, 3, 3), ("scale", 0.0, 3, 3)],
)  # fmt: skip
def test_rejects_out_of_contract_criteria(criterion: tuple) -> None:
    with pytest.raises(ValidationError):
        judgment("1", criterion)


def test_rejects_empty_duplicate_or_extra() -> None:
    good = judgment("1").model_dump()
    for bad in (
        {**good, "criteria": []},
        {**good, "criteria": good["criteria"] * 2},
        {**good, "confidence": 0.9},
        {**good, "preference": "A"},
    ):
        with pytest.raises(ValidationError):
            PairwiseJudgment.model_validate(bad)


@pytest.mark.parametrize(("raw", "expected"), [(1, "1"), (2, "2"), (" Tie", "tie"), ("2", "2")])
def test_preference_spelling_tolerance(raw: object, expected: str) -> None:
    assert (
        PairwiseJudgment.model_validate(
            {**judgment("1").model_dump(), "preference": raw}
        ).preference
        == expected
    )


# --- rubric -------------------------------------------------------------------------------


RUBRIC = [
    {"name": "c0", "description": "fixed 0", "type": "scale", "weight": 1.0},
    {"name": "c1", "description": "fixed 1", "type": "binary", "weight": 3.0},
]


def test_check_rubric_makes_the_rubric_authoritative() -> None:
    echoed = judgment("1", ("binary", 9.0, 1, 0), ("scale", 9.0, 4, 2))
    with pytest.raises(ValidationError):  # c1 scored 4 on a binary rubric criterion
        check_rubric(echoed, parse_rubric(RUBRIC))
    fixed = check_rubric(
        judgment("1", ("scale", 9.0, 5, 1), ("binary", 9.0, 1, 0)), parse_rubric(RUBRIC)
    )
    assert [(c.description, c.weight) for c in fixed.criteria] == [
        ("fixed 0", 1.0),
        ("fixed 1", 3.0),
    ]
    assert weighted_scores(fixed) == (1.0, 0.0)


def test_check_rubric_names_missing_and_unexpected() -> None:
    with pytest.raises(ValueError, match=r"missing \['c1'\], unexpected \[\]"):
        check_rubric(judgment("1"), parse_rubric(RUBRIC))
    assert check_rubric(judgment("1"), None) == judgment("1")


def test_parse_rubric_rejects_zero_weights() -> None:
    with pytest.raises(ValidationError):
        parse_rubric([{**RUBRIC[0], "weight": 0.0}])


# --- positions: round trips ---------------------------------------------------------------


@pytest.mark.parametrize("order", ["forward", "backward"])
@pytest.mark.parametrize("preference", ["1", "2", "tie"])
def test_position_mapping_round_trips(order: str, preference: PositionPreference) -> None:
    assert side_to_position(position_to_side(preference, order), order) == preference


def test_swapping_twice_is_the_identity() -> None:
    original = judgment("2", ("scale", 0.3, 4, 1), ("binary", 0.7, 0, 1))
    assert swap_positions(original) != original
    assert swap_positions(swap_positions(original)) == original


def test_a_swapped_judgment_means_the_same_in_the_other_order() -> None:
    original = judgment("2", ("scale", 0.3, 4, 1), ("binary", 0.7, 0, 1))
    assert to_sides(Pass("forward", original)) == to_sides(
        Pass("backward", swap_positions(original))
    )
    assert Pass("forward", original).position_1 == "A"
    assert Pass("backward", original).position_1 == "B"


# --- weighted scores ----------------------------------------------------------------------


def test_weighted_score_by_hand() -> None:
    scores = weighted_scores(judgment("1", ("scale", 0.3, 4, 1), ("binary", 0.7, 1, 0)))
    assert scores.score_1 == pytest.approx(0.3 * 0.75 + 0.7 * 1.0)
    assert scores.score_2 == pytest.approx(0.0)


def test_weights_are_normalised() -> None:
    raw = weighted_scores(judgment("1", ("scale", 3, 4, 2), ("binary", 7, 1, 0)))
    assert raw.score_1 == pytest.approx(0.925)
    assert raw.score_2 == pytest.approx(0.3 * 0.25)


def test_backward_scores_map_to_the_right_response() -> None:
    sides = to_sides(ok("backward", "1", ("scale", 1.0, 5, 2)))  # B sat in position 1
    assert sides == ("B", 0.25, 1.0)


# --- reconcile ----------------------------------------------------------------------------


@pytest.mark.parametrize("better", ["A", "B", "tie"])
def test_truthful_passes_give_the_right_winner(better: SidePreference) -> None:
    verdict = reconcile(*truthful(better))
    assert (verdict.verdict, verdict.position_flip, verdict.consistent) == (better, False, True)


def test_a_judge_that_always_prefers_position_1_never_wins() -> None:
    verdicts = [reconcile(ok("forward", "1"), ok("backward", "1")) for _ in range(5)]
    assert {(v.verdict, v.position_flip, v.consistent) for v in verdicts} == {("tie", True, False)}
    metrics = pairwise_metrics(verdicts)
    assert (metrics["pairs_a"], metrics["pairs_b"], metrics["position_flips"]) == (0, 0, 5)
    assert (metrics["winrate"], metrics["lower_rate"], metrics["upper_rate"]) == (0.5, 0.5, 0.5)
    assert metrics["position_consistency"] == 0.0


@pytest.mark.parametrize(
    ("forward", "backward", "strict", "expected"),
    [("1", "tie", False, "A"), ("tie", "1", False, "B"), ("1", "tie", True, "tie"),
     ("tie", "1", True, "tie"), ("2", "1", True, "B"), ("tie", "tie", True, "tie")],
)  # fmt: skip
def test_one_tie_and_one_preference(
    forward: str, backward: str, strict: bool, expected: str
) -> None:
    verdict = reconcile(ok("forward", forward), ok("backward", backward), strict_ties=strict)
    assert (verdict.verdict, verdict.position_flip) == (expected, False)


def test_one_failed_pass_is_flagged_and_both_failed_is_an_error() -> None:
    alone = reconcile(failed("forward"), ok("backward", "2", ("scale", 1.0, 1, 5)))
    assert (alone.verdict, alone.single_pass, alone.consistent) == ("A", True, None)
    assert (alone.weighted_score_A, alone.weighted_score_B) == (1.0, 0.0)
    error = reconcile(failed("forward"), failed("backward"))
    assert (error.verdict, error.weighted_score_A, error.score_margin) == ("error", None, None)


def test_weighted_scores_average_the_two_passes() -> None:
    verdict = reconcile(
        ok("forward", "1", ("scale", 1.0, 5, 3)), ok("backward", "2", ("scale", 1.0, 1, 4))
    )
    assert (verdict.weighted_score_A, verdict.weighted_score_B) == (0.875, 0.25)
    assert verdict.score_margin == pytest.approx(0.625)


def test_pass_and_order_are_checked() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Pass("forward")
    with pytest.raises(ValueError, match="exactly one"):
        Pass("forward", judgment("1"), error="boom")
    with pytest.raises(ValueError, match="'sideways'"):
        Pass("sideways", judgment("1"))
    with pytest.raises(ValueError, match="expected a 'forward' pass"):
        reconcile(ok("backward", "1"), ok("backward", "1"))


# --- aggregates ---------------------------------------------------------------------------


def hand_made() -> list:
    """Five pairs covering every outcome; scores chosen so weighted values are round."""
    return [
        reconcile(
            ok("forward", "1", ("scale", 1, 5, 1)), ok("backward", "2", ("scale", 1, 1, 5))
        ),  # A
        reconcile(
            ok("forward", "2", ("scale", 1, 1, 5)), ok("backward", "1", ("scale", 1, 5, 1))
        ),  # B
        reconcile(
            ok("forward", "1", ("scale", 1, 5, 1)), ok("backward", "1", ("scale", 1, 5, 1))
        ),  # flip
        reconcile(ok("forward", "tie"), failed("backward")),  # single-pass tie
        reconcile(failed("forward"), failed("backward")),  # error
    ]


def test_aggregate_counts_by_hand() -> None:
    metrics = pairwise_metrics(hand_made())
    # Per-pair A counts [2,0,1,0,0]: sample variance 0.8, so stderr of the sum sqrt(5 * 0.8) = 2.
    assert metrics["a_scores"] == 3 and metrics["a_scores_stderr"] == pytest.approx(2.0)
    assert metrics["b_scores"] == metrics["score"] == 3
    assert metrics["ties"] == 1 and metrics["ties_stderr"] == pytest.approx(1.0)
    assert metrics["inference_error"] == 3 and metrics["inference_error_stderr"] == pytest.approx(
        2.0
    )
    assert metrics["winrate"] == 0.5
    pairs = ("pairs_total", "pairs_a", "pairs_b", "pairs_tie", "pairs_error")
    assert {k: metrics[k] for k in pairs} == {
        "pairs_total": 5, "pairs_a": 1, "pairs_b": 1, "pairs_tie": 2, "pairs_error": 1,
    }  # fmt: skip
    assert (metrics["position_flips"], metrics["pairs_single_pass"]) == (1, 1)
    assert metrics["position_consistency"] == pytest.approx(2 / 3)


def test_weighted_aggregates_by_hand() -> None:
    metrics = pairwise_metrics(hand_made())
    # Pairs with a valid pass: A = [1, 0, .5, .5], B = [0, 1, .5, .5], margin = [1, -1, 0, 0].
    assert metrics["weighted_score_A"] == metrics["weighted_score_B"] == 0.5
    assert metrics["weighted_score_A_stderr"] == pytest.approx(math.sqrt(1 / 6) / 2)
    assert metrics["score_margin"] == 0.0
    assert metrics["score_margin_stderr"] == pytest.approx(math.sqrt(2 / 3) / 2)


def test_empty_and_undecided_sets_report_null_not_nan() -> None:
    empty = pairwise_metrics([])
    assert empty["winrate"] is None and empty["lower_rate"] is None
    assert empty["weighted_score_A"] is None and empty["position_consistency"] is None
    assert empty["a_scores"] == 0 and empty["a_scores_stderr"] == 0.0
    ties = pairwise_metrics([reconcile(*truthful("tie"))])
    assert (ties["winrate"], ties["upper_rate"], ties["weighted_score_A_stderr"]) == (
        None,
        None,
        0.0,
    )


def test_bootstrap_is_seeded_and_brackets_the_winrate() -> None:
    verdicts = (
        [reconcile(*truthful("B")) for _ in range(20)]
        + [reconcile(*truthful("A")) for _ in range(6)]
        + [reconcile(ok("forward", "1"), ok("backward", "1")) for _ in range(4)]
    )
    counts = pass_counts(verdicts)
    first, again = bootstrap_winrate(counts, seed=7), bootstrap_winrate(counts, seed=7)
    assert first == again
    metrics = pairwise_metrics(verdicts, seed=7)
    assert (metrics["lower_rate"], metrics["upper_rate"]) == first
    assert metrics["winrate"] == pytest.approx(44 / 60)  # B: 20*2 + 4 flips; A: 6*2 + 4
    assert metrics["lower_rate"] < metrics["winrate"] < metrics["upper_rate"]
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_winrate(counts, resamples=0)


def test_metrics_are_json_serialisable() -> None:
    json.dumps(pairwise_metrics(hand_made()), allow_nan=False)


# --- per-pair record ----------------------------------------------------------------------


def test_pair_record_keeps_positions_and_sides() -> None:
    verdict = reconcile(
        ok("forward", "1", ("scale", 1, 5, 2)), Pass("backward", error="timeout", raw="<html>")
    )
    record = pair_record(verdict)
    assert record["pairwise/verdict"] == "A" and record["pairwise/single_pass"] is True
    assert record["pairwise/error_message"] is None
    assert (record["pairwise/forward/preference"], record["pairwise/forward/preference_ab"]) == (
        "1",
        "A",
    )
    assert (
        record["pairwise/forward/criteria"][0] | {"score_A": 5, "score_B": 2}
        == record["pairwise/forward/criteria"][0]
    )
    assert record["pairwise/backward/position_1"] == "B"
    assert (record["pairwise/backward/error_message"], record["pairwise/backward/raw"]) == (
        "timeout", "<html>",
    )  # fmt: skip
    json.dumps(record, allow_nan=False)


def test_pair_record_of_an_error_joins_both_messages() -> None:
    record = pair_record(reconcile(failed("forward"), failed("backward")), prefix="")
    assert record["verdict"] == "error"
    assert record["error_message"] == (
        "forward: forward reply was not JSON; backward: backward reply was not JSON"
    )
    assert record["backward/criteria"] == [] and record["backward/preference_ab"] is None
