"""Whether a list of OpenAI-style chat messages is well formed, naming the message that is not.

Shared by the request column (tasks/dataset/chat.py) and the chat-message reader of agent runs.
"""

from __future__ import annotations

from typing import Any

ROLES = ("system", "user", "assistant", "tool")
# OpenAI content part types and the field each one carries.
PART_FIELDS = {
    "text": "text",
    "refusal": "refusal",
    "image_url": "image_url",
    "input_audio": "input_audio",
    "file": "file",
}


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
