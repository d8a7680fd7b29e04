"""What is wrong with one cell of an evaluation set, in words.

Each check returns None when the value is fine, else a short phrase naming what was expected
(and what was found).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from judges.errors import shown
from judges.pairwise.reconcile import PREFERENCES
from judges.trajectory.conversation import TurnExpectation
from judges.trajectory.expected import ExpectedToolCalls
from tasks.agents.errors import refusal
from tasks.agents.mlflow_trace import TraceError, parse_trace

TEXT = "expected a string"
CHUNKS = "expected a list of {doc_uri: str, content?: str}"


def text_problem(value: Any) -> str | None:
    """A plain string."""
    return None if isinstance(value, str) else TEXT


def expected_response_problem(value: Any) -> str | None:
    """expected_response: a string with something in it."""
    if not isinstance(value, str):
        return TEXT
    if value.strip():
        return None
    return "expected_response is blank: there is nothing to judge against"


def facts_problem(value: Any) -> str | None:
    """expected_facts: a non-empty list of non-blank strings."""
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return f"expected a list of strings; got {shown(value)}"
    if not value:
        return (
            "expected_facts is an empty list: there is nothing to judge against; give at least "
            "one fact, or leave the cell empty (null) for this row"
        )
    blank = [i for i, fact in enumerate(value) if not fact.strip()]
    return f"fact {blank[0]} of expected_facts is blank" if blank else None


def chunks_problem(value: Any) -> str | None:
    """retrieved_context / expected_retrieved_context: chunks, each with a doc_uri."""
    if not isinstance(value, list):
        return f"{CHUNKS}; got {shown(value)}"
    for index, chunk in enumerate(value):
        if not isinstance(chunk, dict):
            return f"{CHUNKS}; chunk {index} is {shown(chunk)}"
        uri = chunk.get("doc_uri")
        if not isinstance(uri, str) or not uri.strip():
            return f"{CHUNKS}; chunk {index} has no doc_uri"
        if not isinstance(chunk.get("content"), str | None):
            return f"{CHUNKS}; chunk {index} has a content that is not a string"
    return None


def trace_problem(value: Any) -> str | None:
    """trace: an MLflow trace the trace parser can read."""
    error = refusal(parse_trace, value, TraceError)
    return None if error is None else trace_problem_text(error)


def trace_problem_text(error: TraceError) -> str:
    """What `trace_problem` says of a trace the parser refused."""
    return f"expected an MLflow trace JSON string with spans: {error}"




YES_NO = ("yes", "no")
LABELS = 'expected an object from judge name to label, e.g. {"correctness": "yes"}'


def labels_problem(value: Any, kinds: Mapping[str, str] | None) -> str | None:
    """human_labels: judge name → "yes"/"no" (null: not labelled), a list of them per chunk.

    Args:
        value: the cell.
        kinds: "row" or "chunk" for every judge name the run knows; None accepts any name
            (a set read only for its responses, e.g. one side of a head-to-head).
    """
    if not isinstance(value, dict):
        return f"{LABELS}; got {shown(value)}"
    for name, label in value.items():
        if kinds is not None and name not in kinds:
            return _unknown_judge(str(name), kinds)
        problem = _label_problem(str(name), label, None if kinds is None else kinds[name])
        if problem:
            return problem
    return None


def _unknown_judge(name: str, kinds: Mapping[str, str]) -> str:
    shared = sorted(k for k in kinds if k.endswith(f"/{name}"))
    if shared:
        return (f"judge name {name!r} is shared by several judges of this run: write "
                f"{' or '.join(map(repr, shared))}")
    return f"unknown judge {name!r}; labels may name: {', '.join(sorted(kinds))}"


def _label_problem(name: str, label: Any, kind: str | None) -> str | None:
    if label is None:
        return None
    if isinstance(label, list):
        if kind == "row":
            return f'judge {name!r} rates whole rows: expected "yes" or "no", got a list'
        bad = [i for i, item in enumerate(label) if item is not None and item not in YES_NO]
        if bad:
            return (f'label of chunk {bad[0]} for judge {name!r}: expected "yes", "no" or '
                    f"null; got {shown(label[bad[0]])}")
        return None
    if kind == "chunk":
        return (f'judge {name!r} rates each retrieved chunk: expected a list of "yes"/"no" '
                f"aligned with retrieved_context; got {shown(label)}")
    if label not in YES_NO:
        return f'label of judge {name!r}: expected "yes" or "no"; got {shown(label)}'
    return None


def chunk_labels_problem(labels: Any, kinds: Mapping[str, str] | None,
                         chunk_count: int) -> str | None:
    """Per-chunk labels must have one entry per retrieved chunk (after a trace is read)."""
    for name, label in (labels or {}).items():
        chunked = kinds[name] == "chunk" if kinds is not None else isinstance(label, list)
        if chunked and isinstance(label, list) and len(label) != chunk_count:
            return (f"judge {name!r} has {len(label)} chunk label(s) but the row has "
                    f"{chunk_count} retrieved chunk(s): give one label (or null) per chunk")
    return None


def preference_problem(value: Any) -> str | None:
    """human_preference: "A", "B" or "tie"."""
    return None if value in PREFERENCES else f'expected "A", "B" or "tie"; got {shown(value)}'


EXPECTED_CALLS = ('expected a list of {name, arguments?} or {"calls": [...], "ordered": '
                  'true|false, "argument_rules": {argument: rule}}')


def first_error(error: ValidationError) -> tuple[str, str]:
    """Where (dotted path, "" for the value itself) and what, of a model's first problem."""
    first = error.errors()[0]
    return ".".join(map(str, first["loc"])), first["msg"].removeprefix("Value error, ")


def expected_tool_calls_problem(value: Any) -> str | None:
    """expected_tool_calls: the calls an agent should make, and how to compare them."""
    if not isinstance(value, list | dict):
        return f"{EXPECTED_CALLS}; got {shown(value)}"
    error = refusal(ExpectedToolCalls.from_cell, value, ValidationError)
    if error is None:
        return None
    where, detail = first_error(error)
    return f"{EXPECTED_CALLS}; {where + ': ' if where else ''}{detail}"


EXPECTED_TURNS = ('expected a list with one entry per assistant turn: null, {"expected_response": '
                  'str} or {"expected_facts": [str, ...]}')


def expected_turns_problem(value: Any) -> str | None:
    """expected_turns: one expectation (or null) per assistant turn of the session."""
    if not isinstance(value, list) or not value:
        return f"{EXPECTED_TURNS}; got {shown(value)}"
    for index, entry in enumerate(value):
        if entry is None:
            continue
        if not isinstance(entry, dict):
            return f"{EXPECTED_TURNS}; entry {index} is {shown(entry)}"
        if (error := refusal(TurnExpectation.model_validate, entry, ValidationError)) is not None:
            where, detail = first_error(error)
            return f"{EXPECTED_TURNS}; entry {index}{' ' + where if where else ''}: {detail}"
    if all(entry is None for entry in value):
        return "expected_turns gives no turn an expectation: leave the cell empty (null) instead"
    return None
