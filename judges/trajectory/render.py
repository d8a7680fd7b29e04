"""The text a judge reads for a trajectory: every step in order, nothing dropped silently.

Each step is a header line at the start of a line (`Step 3 · tool result · search · ERROR`)
followed by its content, every content line indented. The content is the run's own text (user,
model and tool output), so it is untrusted: indenting every line means no content can forge a
step header, and names in headers are flattened to one line. The rendered text goes into a
prompt like every other evaluated text, through `judges.base.untrusted` (the `untrusted`
filter), which neutralises anything inside it that could close or open an <untrusted-…> block.

Long content is cut to `max_chars_per_step` characters per piece (a message's text, one call's
arguments, a result) and the cut is said where it happens: `[… truncated 1234 characters]`.
A piece, not the whole step, so that a long argument cannot push a step's other calls out.
"""

from __future__ import annotations

import json

from judges.trajectory.model import Step, ToolCall, Trajectory

DEFAULT_MAX_CHARS_PER_STEP = 2000
MAX_HEADER_NAME_CHARS = 200
INDENT = "    "
SEPARATOR = "·"  # between a step header's fields
_HEADERS = {
    "system_message": "system",
    "user_message": "user",
    "assistant_message": "assistant",
    "tool_call": "assistant calls tools",
    "tool_result": "tool result",
    "retrieval": "retrieval",
    "llm_call": "model call",
    "agent": "sub-agent",
}


def truncated(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with a marker saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}[… truncated {len(text) - limit} characters]"


def render_for_judge(trajectory: Trajectory,
                     max_chars_per_step: int = DEFAULT_MAX_CHARS_PER_STEP) -> str:
    """The trajectory as a judge reads it: one block per step, in order.

    Args:
        trajectory: the run.
        max_chars_per_step: the longest any one piece of a step's content may be before it is
            cut with a marker.

    Returns:
        Plain text, to be wrapped as untrusted text before it enters a prompt.
    """
    if max_chars_per_step < 1:
        raise ValueError(f"max_chars_per_step must be at least 1, got {max_chars_per_step!r}")
    if not trajectory.steps:
        return "(the run recorded no steps)"
    return "\n".join(_step_block(number, step, max_chars_per_step)
                     for number, step in enumerate(trajectory.steps, start=1))


def _step_block(number: int, step: Step, limit: int) -> str:
    lines = [_header(number, step)]
    pieces = _content(step, limit)
    lines += [INDENT + line for piece in pieces for line in (piece.splitlines() or [""])]
    return "\n".join(lines)


def _header(number: int, step: Step) -> str:
    parts = [f"Step {number}", _HEADERS[step.kind]]
    if step.kind == "tool_call" and not step.text:
        parts[-1] += " (no text)"
    if step.name:
        parts.append(_one_line(step.name))
    if step.call_id:
        parts.append(f"answers {_one_line(step.call_id)}")
    if step.duration_seconds is not None:
        parts.append(f"{step.duration_seconds:.2f} s")
    if step.is_error:
        parts.append("ERROR")
    return f" {SEPARATOR} ".join(parts)


def _content(step: Step, limit: int) -> list[str]:
    pieces = []
    if step.text:
        label = {"retrieval": "query: ", "agent": "asked: "}.get(step.kind, "")
        pieces.append(label + truncated(step.text, limit))
    pieces += [_call_line(call, limit) for call in step.tool_calls]
    pieces += [f"document {number} ({_one_line(doc.doc_uri or 'no uri')}): "
               f"{truncated(doc.content or '', limit)}"
               for number, doc in enumerate(step.documents, start=1)]
    if step.result is not None:
        label = "returned: " if step.kind in ("agent", "retrieval") else ""
        pieces.append(label + truncated(step.result, limit))
    elif step.kind == "tool_result":
        pieces.append("(the tool returned nothing)")
    return pieces


def _call_line(call: ToolCall, limit: int) -> str:
    head = f"call {_one_line(call.name)}"
    if call.call_id:
        head += f" (id {_one_line(call.call_id)})"
    if call.arguments is not None:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        return f"{head} with arguments {truncated(arguments, limit)}"
    if call.raw_arguments is not None:
        return (f"{head} with arguments that are not a JSON object, as given: "
                f"{truncated(call.raw_arguments, limit)}")
    return f"{head} with no arguments recorded"


def _one_line(name: str) -> str:
    """A name fit for a header: no line breaks or control characters, bounded in length.

    The header's separator is swapped for a look-alike inside names, so that a tool named
    `search · ERROR` cannot mark its step as failed (or add any other header field).
    """
    flat = "".join(" " if not c.isprintable() else "•" if c == SEPARATOR else c for c in name)
    return truncated(flat, MAX_HEADER_NAME_CHARS)
