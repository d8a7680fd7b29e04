"""The request column: its three shapes, checked in plain words and turned into chat messages.

A request is a string, `{"messages": [...]}` (OpenAI chat) or `{"query": str, "history": [...]}`.
Each check returns the first thing wrong as a short phrase (None when the value is fine), so
that validation can say *what* is wrong with a row rather than only which shapes exist.
"""

from __future__ import annotations

from typing import Any

from judges.rows import content_text
from tasks.dataset.cells import shown

ROLES = ("system", "user", "assistant", "tool")
# OpenAI content part types and the field each one carries.
PART_FIELDS = {
    "text": "text",
    "refusal": "refusal",
    "image_url": "image_url",
    "input_audio": "input_audio",
    "file": "file",
}
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


def messages_problem(messages: Any, where: str, *, may_be_empty: bool) -> str | None:
    """What is wrong with a list of chat messages, naming the message by its position."""
    if not isinstance(messages, list):
        return f"{where} must be a list of {{role, content}} messages, got {messages!r:.60}"
    if not messages and not may_be_empty:
        return f"{where} is empty: there is no request to judge"
    for index, message in enumerate(messages):
        problem = _message_problem(message, f"{where}[{index}]")
        if problem:
            return problem
    return None


def _message_problem(message: Any, where: str) -> str | None:
    if not isinstance(message, dict):
        return f"{where} must be a {{role, content}} object, got {message!r:.60}"
    role = message.get("role")
    if role not in ROLES:
        return f"{where} has role {role!r}; expected one of {', '.join(ROLES)}"
    content = message.get("content")
    if content is None and message.get("tool_calls"):
        return None  # an assistant turn that only calls tools
    return _content_problem(content, where)


def _content_problem(content: Any, where: str) -> str | None:
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return (
            f"{where}.content must be a string or a list of content parts, got {content!r:.60}"
        )
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        field = PART_FIELDS.get(kind)
        if field is None:
            return (
                f"{where}.content[{index}] is not an OpenAI content part "
                f"({{'type': 'text', 'text': ...}} or {', '.join(list(PART_FIELDS)[1:])}), "
                f"got {part!r:.60}"
            )
        if field in ("text", "refusal") and not isinstance(part.get(field), str):
            return f"{where}.content[{index}] needs a string {field!r}"
    return None


def request_messages(request: Any) -> list[dict]:
    """A validated request in any of its three shapes as OpenAI chat messages."""
    if isinstance(request, str):
        return [{"role": "user", "content": request}]
    if "messages" in request:
        return list(request["messages"])
    return [*(request.get("history") or []), {"role": "user", "content": request["query"]}]
