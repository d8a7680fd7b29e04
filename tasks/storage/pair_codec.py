"""Pairwise verdicts as plain JSON, and back: what a persisted chunk of pairs holds.

A verdict is stored as its two passes (each the validated judgment or the error, and the raw
reply); decoding runs them through the same reconciliation as judging did, so a resumed pair
gets its verdict by the run's own rules, never one read from the file. JSON, not pickle, for
the reasons in tasks/storage/row_codec.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from judges.builtin.pairwise import (
    PAIRWISE_JUDGE,
    Pair,
    PairwiseOptions,
    forward_only,
    vote_panel,
)
from judges.model.settings import LLMSettings
from judges.pairwise.models import PairwiseJudgment
from judges.pairwise.reconcile import PairVerdict, Pass, reconcile
from tasks.storage.row_codec import ResultCodecError, chunk_fingerprint


def _encode_pass(judge_pass: Pass) -> dict:
    judgment = judge_pass.judgment
    return {"order": judge_pass.order, "error": judge_pass.error, "raw": judge_pass.raw,
            "judgment": None if judgment is None else judgment.model_dump(mode="json")}


def _decode_pass(data: dict, order: str) -> Pass:
    if data["order"] != order:
        raise ResultCodecError(f"expected a {order!r} pass, got {data['order']!r}")
    judgment = data["judgment"]
    return Pass(order, None if judgment is None else PairwiseJudgment.model_validate(judgment),
                data["error"], data["raw"])


def encode_pair_verdict(verdict: PairVerdict) -> dict:
    """A pair's verdict as its two passes; a panel's as each member's model and passes."""
    if verdict.members:
        return {"members": [{"model": m.model, **({"advisory": True} if m.advisory else {}),
                             **encode_pair_verdict(m.judged)} for m in verdict.members]}
    return {"forward": _encode_pass(verdict.forward), "backward": _encode_pass(verdict.backward)}


def decode_pair_verdict(data: dict, options: PairwiseOptions) -> PairVerdict:
    """A pair's verdict, reconciled again from its stored passes under the run's options.

    Raises:
        ResultCodecError: a pass of the wrong order or shape.
    """
    try:
        if "members" in data:  # a panel: each member reconciled again, then voted on again
            members = data["members"]
            advisory = [m.get("advisory", False) for m in members]
            if not all(isinstance(flag, bool) for flag in advisory):
                raise ResultCodecError(f"a member's advisory must be true or false: {advisory}")
            return vote_panel([decode_pair_verdict(m, options) for m in members],
                              [str(m["model"]) for m in members], options.swap,
                              [not flag for flag in advisory])
        forward = _decode_pass(data["forward"], "forward")
        if not options.swap:
            return forward_only(forward)
        backward = _decode_pass(data["backward"], "backward")
        return reconcile(forward, backward, strict_ties=options.strict_ties)
    except ResultCodecError:
        raise
    except (KeyError, TypeError, ValueError, ValidationError) as error:
        message = f"malformed stored pair verdict: {type(error).__name__}: {error}"
        raise ResultCodecError(message) from None


def pairs_fingerprint(pairs: Sequence[Pair], options: PairwiseOptions,
                      settings: LLMSettings) -> str:
    """The fingerprint of a chunk of pairs: pairs, rubric, tie rules, judge prompt and model."""
    rubric = None if options.rubric is None else options.rubric.model_dump(mode="json")
    return chunk_fingerprint(
        "pairs", [p.model_dump(mode="json", fallback=str) for p in pairs],
        options={"rubric": rubric, "swap": options.swap, "strict_ties": options.strict_ties},
        judge=PAIRWISE_JUDGE.manifest_entry(), model=settings.call_identity(),
    )
