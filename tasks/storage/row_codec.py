"""Typed judge outcomes as plain JSON, and back: what a persisted chunk holds.

JSON, not pickle: a run's folder may be a shared bucket, and loading a pickle from it would
run whatever code its writer put there. A result names its judges and metrics; decoding
resolves each name through the run's plan, so a stored result can only ever refer to judges
that this run planned, and anything that does not fit is a `ResultCodecError` (the caller
judges the chunk again).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import fields

from judges.base import JudgeSpec
from judges.model.settings import LLMSettings
from judges.model.usage import Spend, Usage
from judges.plan import JudgePlan
from judges.results import JudgeResult, RowResult, Verdict
from judges.rows import EvalRow

# Bumped whenever the encoding below or the meaning of a stored result changes: a fingerprint
# includes it, so results written by an older judgeflow are judged again rather than misread.
# 2: a chunk's usage holds its cached input tokens, unpriced calls and spend per judge.
# 3: a judged row's result no longer holds a copy of its row.
# 4: a chunk's call log is stored as its JSON lines, one string (tasks/call_log.py).
CODEC_VERSION = 4


class ResultCodecError(ValueError):
    """A stored result that does not decode against this run's plan."""


def row_json(row: EvalRow) -> dict:
    """A row as JSON values (a value JSON cannot hold becomes its text, as in results.jsonl)."""
    return row.model_dump(mode="json", fallback=str)


def _verdict(verdict: Verdict) -> dict:
    out = {"rating": verdict.rating, "rationale": verdict.rationale, "error": verdict.error}
    if verdict.model is not None:  # a panel member's
        out["model"] = verdict.model
    if verdict.advisory:  # an advisory member's (absent for a voting one, as before)
        out["advisory"] = True
    return out


def _judge_result(result: JudgeResult) -> dict:
    out = {
        "judge": result.spec.name,
        "verdict": _verdict(result.verdict),
        "applied": result.applied,
        "chunks": [_verdict(v) for v in result.chunks],
        "precision": result.precision,
        "unjudged_chunks": result.unjudged_chunks,
        "samples": list(result.samples),
    }
    if result.ballots:  # a panel's: absent for one judge model, as before
        out["ballots"] = [[_verdict(v) for v in ballot] for ballot in result.ballots]
    return out


def encode_row_result(result: RowResult) -> dict:
    """One row's results as JSON values: each judge's outcome and each metric's value.

    Not the row: the chunk's fingerprint already stands for its rows, and whoever reads the
    result back holds them (`decode_row_result`).
    """
    return {
        "judges": [_judge_result(j) for j in result.judges],
        "metrics": [[metric.name, value] for metric, value in result.metrics],
    }


def _optional_text(value: object, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ResultCodecError(f"{what} must be text or null, got {type(value).__name__}")
    return value


def _decode_verdict(data: dict) -> Verdict:
    return Verdict(_optional_text(data["rating"], "rating"),
                   _optional_text(data["rationale"], "rationale"),
                   _optional_text(data["error"], "error"),
                   _optional_text(data.get("model"), "model"),
                   _flag(data.get("advisory", False), "advisory"))


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ResultCodecError(f"{what} must be true or false, got {value!r}")
    return value


def _optional_number(value: object, what: str) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ResultCodecError(f"{what} must be a number or null, got {value!r}")
    return value


def _decode_judge_result(data: dict, spec: JudgeSpec) -> JudgeResult:
    return JudgeResult(
        spec,
        _decode_verdict(data["verdict"]),
        applied=bool(data["applied"]),
        chunks=tuple(_decode_verdict(v) for v in data["chunks"]),
        precision=_optional_number(data["precision"], "precision"),
        unjudged_chunks=int(data["unjudged_chunks"]),
        samples=tuple(_optional_text(s, "sample") for s in data["samples"]),
        ballots=tuple(tuple(_decode_verdict(v) for v in ballot)
                      for ballot in data.get("ballots", ())),
    )


def decode_row_result(data: dict, plan: JudgePlan, row: EvalRow) -> RowResult:
    """A row's results from `encode_row_result`, its judges and metrics resolved by name.

    `row` is the run's own row at that place, which the chunk's fingerprint matched: a stored
    result holds no copy of its row, so what is published is the row the user gave, and the
    parent of a sharded run parses and validates no row twice.

    Raises:
        ResultCodecError: a judge or metric the plan does not hold, in another order, or a
            value of the wrong shape.
    """
    try:
        names = [j["judge"] for j in data["judges"]]
        if names != [spec.name for spec in plan.judges]:
            raise ResultCodecError(f"stored judges {names} are not this run's plan")
        metric_names = [name for name, _ in data["metrics"]]
        if metric_names != [metric.name for metric in plan.metrics]:
            raise ResultCodecError(f"stored metrics {metric_names} are not this run's plan")
        judges = tuple(_decode_judge_result(j, spec)
                       for j, spec in zip(data["judges"], plan.judges, strict=True))
        metrics = tuple((metric, _optional_number(value, metric.name))
                        for metric, (_, value) in zip(plan.metrics, data["metrics"], strict=True))
        return RowResult(row, judges, metrics)
    except ResultCodecError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        message = f"malformed stored result: {type(error).__name__}: {error}"
        raise ResultCodecError(message) from None


def encode_usage(usage: Usage) -> dict:
    """A usage tally as JSON values."""
    return usage.as_dict()


def decode_usage(data: dict) -> Usage:
    """A usage tally from `encode_usage`; a missing counter is zero, an unknown one an error.

    Raises:
        ResultCodecError: a counter that is not a number, or one `Usage` does not have.
    """
    known = {f.name for f in fields(Usage)}
    if not isinstance(data, dict) or set(data) - known:
        raise ResultCodecError(f"malformed stored usage: {data!r}")
    answered = data.get("answered_by") or {}
    if not isinstance(answered, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in answered.items()):
        raise ResultCodecError(f"malformed stored usage: {data!r}")
    by_judge = data.get("by_judge") or {}
    by_model = data.get("by_model") or {}
    if not all(isinstance(spends, dict) and all(isinstance(k, str) for k in spends)
               for spends in (by_judge, by_model)):
        raise ResultCodecError(f"malformed stored usage: {data!r}")
    return Usage(**{name: _optional_number(value, name) or 0 for name, value in data.items()
                    if name not in ("answered_by", "by_judge", "by_model")},
                 answered_by=dict(answered),
                 by_judge={judge: _decode_spend(spend) for judge, spend in by_judge.items()},
                 by_model={model: _decode_spend(spend) for model, spend in by_model.items()})


def _decode_spend(data: object) -> Spend:
    known = {f.name for f in fields(Spend)}
    if not isinstance(data, dict) or set(data) - known:
        raise ResultCodecError(f"malformed stored spend: {data!r}")
    return Spend(**{name: _optional_number(value, name) or 0 for name, value in data.items()})


def plan_identity(plan: JudgePlan) -> dict:
    """What about the planned judges changes their results: names, versions, prompts, votes."""
    return {
        "judges": [
            {"name": spec.name, "class": type(spec).__name__, "kind": spec.kind,
             "mode": spec.mode, "version": spec.version, "prompt_hash": spec.prompt_hash,
             "samples": spec.samples, "requires": list(spec.requires), "prefix": spec.prefix}
            for spec in plan.judges
        ],
        "metrics": [[metric.name, metric.field] for metric in plan.metrics],
    }


# Where the rows go in the payload's text: random, so that no plan or option can hold it.
_ROWS_HOLE = f"rows-{secrets.token_hex(16)}"


def chunk_fingerprint(kind: str, rows: Iterable[dict], **identity: object) -> str:
    """sha256 over what changes a chunk's output: its kind, its rows' content and `identity`.

    `identity` holds what else decides the output (the plan's identity, the model's call
    identity, the pairwise options); never a secret, a client or a timestamp. Only the digest
    is stored, so nothing hashed here can be read back from the store.

    The digest is of the payload's JSON text, {"codec", "kind", "rows": [...], ...identity}
    with sorted keys, but that text is never made whole: it is hashed a row at a time, so
    that a chunk of large rows is not held twice more (its text and that text's bytes).
    """
    def text(value: object) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)

    head, _, tail = text({"codec": CODEC_VERSION, "kind": kind, "rows": _ROWS_HOLE,
                          **identity}).partition(text(_ROWS_HOLE))
    digest = hashlib.sha256(f"{head}[".encode())
    for index, row in enumerate(rows):
        digest.update(f"{', ' if index else ''}{text(row)}".encode())
    digest.update(f"]{tail}".encode())
    return digest.hexdigest()


def judge_fingerprint(rows: Sequence[EvalRow], plan: JudgePlan, settings: LLMSettings) -> str:
    """The fingerprint of a judged chunk: its rows, the plan, the judge model and sampling."""
    return chunk_fingerprint("judge", (row_json(r) for r in rows), plan=plan_identity(plan),
                             model=settings.call_identity())


def generation_fingerprint(rows: Sequence[EvalRow], settings: LLMSettings) -> str:
    """The fingerprint of a generated chunk: its rows as given and the candidate model."""
    return chunk_fingerprint("generate", (row_json(r) for r in rows),
                             model=settings.call_identity())
