"""OpenAI-style chat messages with tool calls, read into a trajectory.

The messages are those of the Chat Completions API: `system`, `user`, `assistant` (content
and/or `tool_calls: [{id, type: "function", function: {name, arguments}}]`, arguments a JSON
string) and `tool` (`tool_call_id`, content). Chat messages have no error flag for a tool
result; a `tool` message may carry `is_error: true` (as Anthropic's tool_result blocks do) to say
that the tool failed. Messages carry no timing, so these steps have none.

`assistant_step` is also how the span readers read the assistant message a model span returned,
so a model's tool calls mean the same whichever source recorded them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judges.errors import shown
from judges.rows import content_text
from judges.trajectory.model import Step, ToolCall, Trajectory
from tasks.agents.errors import AgentRunError
from tasks.agents.messages import messages_problem


def trajectory_from_chat_messages(messages: Any) -> Trajectory:
    """A conversation's messages as a trajectory, one step per message.

    Raises:
        AgentRunError: naming the message (`messages[3]`) that is malformed, or the tool
            message that answers no earlier tool call.
    """
    problem = messages_problem(messages, "messages", may_be_empty=False)
    if problem:
        raise AgentRunError(problem)
    steps: list[Step] = []
    calls: dict[str, ToolCall] = {}  # every call so far, by id: which tool a result is from
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        step = _message_step(message, where, calls).model_copy(update={"source_id": where})
        calls.update({call.call_id: call for call in step.tool_calls if call.call_id})
        steps.append(step)
    return Trajectory(steps=tuple(steps))


def _message_step(message: Mapping[str, Any], where: str, calls: dict[str, ToolCall]) -> Step:
    role = message["role"]
    if role != "assistant" and message.get("tool_calls") is not None:
        raise AgentRunError(f"{where} is a {role} message with tool_calls; "
                            "only assistant messages call tools")
    if role == "assistant":
        return assistant_step(message, where)
    if role == "tool":
        return _tool_result(message, where, calls)
    kind = "user_message" if role == "user" else "system_message"
    return Step(kind=kind, text=content_text(message.get("content")))


def _tool_result(message: Mapping[str, Any], where: str, calls: dict[str, ToolCall]) -> Step:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or call_id not in calls:
        answered = "is missing" if call_id is None else f"{shown(call_id)} answers no earlier call"
        raise AgentRunError(
            f"{where} (tool): tool_call_id {answered}; a tool message answers a "
            "call made by an earlier assistant message's tool_calls")
    is_error = message.get("is_error", False)
    if not isinstance(is_error, bool):
        raise AgentRunError(
            f"{where} (tool): is_error must be true or false, got {shown(is_error)}")
    return Step(kind="tool_result", name=calls[call_id].name, call_id=call_id,
                result=content_text(message.get("content")), is_error=is_error)


def assistant_step(message: Mapping[str, Any], where: str) -> Step:
    """An assistant message as a step: `tool_call` when it calls tools, else `assistant_message`.

    Blank text is no text, so a tool-only message reads the same whether its content was
    null or "".

    Raises:
        AgentRunError: when its content or tool_calls are malformed, naming `where`.
    """
    content = message.get("content")
    if content is not None and not isinstance(content, str) and not (
            isinstance(content, list) and all(isinstance(part, Mapping) for part in content)):
        raise AgentRunError(f"{where}: the assistant's content must be a string or a list of "
                            f"content parts, got {shown(content)}")
    text = content_text(content)
    text = text if text.strip() else None
    calls = tool_calls_of(message.get("tool_calls"), where)
    if calls:
        return Step(kind="tool_call", text=text, tool_calls=calls)
    return Step(kind="assistant_message", text=text)


def tool_calls_of(raw_calls: Any, where: str) -> tuple[ToolCall, ...]:
    """OpenAI `tool_calls` as ToolCalls; arguments may be JSON text or an object.

    Raises:
        AgentRunError: naming the call (`{where}, tool_calls[1]`) that is malformed.
    """
    if raw_calls is None:
        return ()
    if not isinstance(raw_calls, list):
        raise AgentRunError(f"{where}: tool_calls must be a list, got {shown(raw_calls)}")
    return tuple(_tool_call(call, f"{where}, tool_calls[{i}]") for i, call in enumerate(raw_calls))


def _tool_call(call: Any, where: str) -> ToolCall:
    if not isinstance(call, Mapping):
        raise AgentRunError(f"{where} must be an object {{id, type, function}}, got {shown(call)}")
    if call.get("type", "function") != "function":
        raise AgentRunError(f"{where} has type {shown(call.get('type'))}; only function tool "
                            "calls are read")
    function = call.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name.strip():
        raise AgentRunError(f"{where}: function.name is missing; expected "
                            "{'function': {'name': str, 'arguments': str}}")
    call_id = call.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise AgentRunError(f"{where}: id must be a string, got {shown(call_id)}")
    return ToolCall.from_recorded(name, function.get("arguments"), call_id)
