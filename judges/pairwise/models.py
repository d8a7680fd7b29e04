"""Pairwise rubric judge (Nova style): the pydantic models of a rubric and of one judge pass.

A pass speaks in prompt positions "1"/"2"; `PairwiseJudgment` is both the response_format
schema and the parser of the reply, `Rubric` holds criteria fixed by the user, and
`check_rubric` makes that rubric authoritative over what the model echoed. Pure logic only: no
prompt, no network. Position mapping and reconciliation live in judges/pairwise/reconcile.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

CriterionType = Literal["scale", "binary"]
PositionPreference = Literal["1", "2", "tie"]

_SCORE_RANGE: dict[CriterionType, tuple[int, int]] = {"scale": (1, 5), "binary": (0, 1)}


class RubricCriterion(BaseModel):
    """One criterion of a rubric, as a user writes it in a rubric file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, description="Short snake_case identifier, e.g. price_validation."
    )
    description: str = Field(description="What the criterion checks, in one sentence.")
    type: CriterionType = Field(
        description="'scale' for a score from 1 (poor) to 5 (excellent); 'binary' for 0 or 1."
    )
    weight: float = Field(
        ge=0, allow_inf_nan=False, description="Relative importance, >= 0; normalised to sum 1."
    )


class CriterionScore(RubricCriterion):
    """One evaluation criterion, with the score of each of the two responses."""

    # Class docstrings become schema descriptions the judge model reads: keep them model-facing.

    score_1: int = Field(description="Score of the response in position 1 (1-5 scale, or 0/1).")
    score_2: int = Field(description="Score of the response in position 2 (1-5 scale, or 0/1).")

    @field_validator("score_1", "score_2", mode="before")
    @classmethod
    def _binary_accepts_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        # Nova's binary criteria are true/false; a bool on a scale criterion is a model mistake.
        if isinstance(value, bool):
            if info.data.get("type") != "binary":
                raise ValueError(f"a boolean score {value!r} needs a binary criterion")
            return int(value)
        return value

    @model_validator(mode="after")
    def _scores_in_range(self) -> CriterionScore:
        low, high = _SCORE_RANGE[self.type]
        for score in (self.score_1, self.score_2):
            if not low <= score <= high:
                raise ValueError(
                    f"{self.type} score of {self.name!r} must be {low}..{high}, got {score!r}"
                )
        return self


def _check_criteria(criteria: list[Any]) -> None:
    names = [c.name for c in criteria]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"criterion names must be unique, repeated: {duplicates!r}")
    if sum(c.weight for c in criteria) <= 0:
        raise ValueError(
            f"criterion weights must have a positive sum, got {[c.weight for c in criteria]!r}"
        )


class PairwiseJudgment(BaseModel):
    """Your judgment of two responses: criteria scored for both, then an overall preference."""

    # One judge pass; both the response_format schema and the parser of the reply (habit 2).

    model_config = ConfigDict(extra="forbid")

    criteria: list[CriterionScore] = Field(
        min_length=1, description="Evaluation criteria, each scored for both responses."
    )
    preference: PositionPreference = Field(
        description="Better response overall: '1' (position 1), '2' (position 2) or 'tie'."
    )
    rationale: str = Field(
        description="Brief justification of the preference, citing the criteria."
    )

    @field_validator("preference", mode="before")
    @classmethod
    def _tolerate_preference_spelling(cls, value: Any) -> Any:
        # 1, " Tie" and "TIE" are unambiguous; anything else (e.g. "A") stays an error.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _criteria_consistent(self) -> PairwiseJudgment:
        _check_criteria(self.criteria)
        return self

    def verdict_key(self) -> tuple:
        """What two replies must share to be the same judgment: preference and every score."""
        scores = sorted((c.name, c.score_1, c.score_2) for c in self.criteria)
        return (self.preference, scores)


class Rubric(BaseModel):
    """Fixed criteria supplied by the user; the judge then only scores them."""

    model_config = ConfigDict(extra="forbid")

    criteria: list[RubricCriterion] = Field(min_length=1, description="The fixed criteria.")

    @model_validator(mode="after")
    def _criteria_consistent(self) -> Rubric:
        _check_criteria(self.criteria)
        return self


def parse_rubric(data: Any) -> Rubric:
    """Validate a loaded rubric file: a list of criteria, or a mapping with a `criteria` key.

    Raises:
        pydantic.ValidationError: when a criterion is malformed or the weights sum to zero.
    """
    return Rubric.model_validate({"criteria": data} if isinstance(data, list) else data)


def check_rubric(judgment: PairwiseJudgment, rubric: Rubric | None) -> PairwiseJudgment:
    """Check that a pass scored exactly the rubric's criteria, and make the rubric authoritative.

    The user's description, type and weight replace whatever the model echoed, in rubric order,
    so a judge cannot reweight a fixed rubric. Without a rubric the judgment is returned as is.

    Raises:
        ValueError: when criterion names differ, or a score does not fit the rubric's type.
    """
    if rubric is None:
        return judgment
    scored = {c.name: c for c in judgment.criteria}
    expected = [c.name for c in rubric.criteria]
    if set(scored) != set(expected):
        missing, extra = sorted(set(expected) - set(scored)), sorted(set(scored) - set(expected))
        raise ValueError(
            f"criteria do not match the rubric: missing {missing!r}, unexpected {extra!r}"
        )
    criteria = [
        {**c.model_dump(), "score_1": scored[c.name].score_1, "score_2": scored[c.name].score_2}
        for c in rubric.criteria
    ]
    return PairwiseJudgment.model_validate({**judgment.model_dump(), "criteria": criteria})
