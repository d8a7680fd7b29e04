"""What is wrong with one cell of an evaluation set, in words: each check returns None when the
value is fine, else a short phrase naming what was expected (and what was found).
"""

from __future__ import annotations

from typing import Any

from tasks.traces import TraceError, parse_trace

TEXT = "expected a string"
CHUNKS = "expected a list of {doc_uri: str, content?: str}"


def text_problem(value: Any) -> str | None:
    return None if isinstance(value, str) else TEXT


def expected_response_problem(value: Any) -> str | None:
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
    try:
        parse_trace(value)
    except TraceError as error:
        return f"expected an MLflow trace JSON string with spans: {error}"
    return None


def shown(value: Any) -> str:
    """A value as quoted in a message: its repr, cut to 80 characters."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."
