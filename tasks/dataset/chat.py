"""The request column: its three shapes, checked in plain words and turned into chat messages.

A request is a string, `{"messages": [...]}` (OpenAI chat) or `{"query": str, "history": [...]}`.
Each check returns the first thing wrong as a short phrase (None when the value is fine), so
that validation can say *what* is wrong with a row rather than only which shapes exist.
"""

from __future__ import annotations

from typing import Any

from judges.errors import shown
from judges.rows import content_text
from tasks.agents.messages import messages_problem

REQUEST_SHAPES = (
    "expected a non-empty string, {'messages': [{role, content}, ...]} or "
    "{'query': str, 'history': [...]}"
)


def request_problem(value: Any) -> str | None:
    """What is wrong with a request value, or None when it can be judged."""
    if isinstance(value, str):
        return None if value.strip() else "the request is empty"
    if not isinstance(value, dict):
        return f"{REQUEST_SHAPES}; got {shown(value)}"
    if "messages" in value:
        problem = messages_problem(value["messages"], "messages", may_be_empty=False)
        if problem is None and not any(
            content_text(m.get("content")).strip() for m in value["messages"]
        ):
            return "the request is empty: every message's content is blank"
        return problem
    if "query" not in value:
        return f"a request object needs 'messages' or 'query'; {REQUEST_SHAPES}"
    query = value["query"]
    if not isinstance(query, str) or not query.strip():
        return f"query must be a non-empty string, got {query!r:.60}"
    history = value.get("history")
    if history is None:
        return None
    return messages_problem(history, "history", may_be_empty=True)


def request_messages(request: Any) -> list[dict]:
    """A validated request in any of its three shapes as OpenAI chat messages."""
    if isinstance(request, str):
        return [{"role": "user", "content": request}]
    if "messages" in request:
        return list(request["messages"])
    return [*(request.get("history") or []), {"role": "user", "content": request["query"]}]
