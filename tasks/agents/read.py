"""A `trajectory` cell in whichever form the user has it, read with the matching reader.

Accepted: OpenAI-style chat messages (a list of {role, content, tool_calls?}), an MLflow trace
or a list of them (one per turn), an OpenInference / OpenTelemetry GenAI span export (a list of
spans, {"spans": [...]} or OTLP JSON), or judgeflow's own published form ({"steps": [...]}, what
results.jsonl holds, so a published run reads back as it was). JSON text of any of them too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from judges.errors import shown
from judges.trajectory.model import Trajectory
from tasks.agents.chat_messages import trajectory_from_chat_messages
from tasks.agents.errors import AgentRunError, refusal, too_deep
from tasks.agents.mlflow_spans import trajectory_from_mlflow
from tasks.agents.mlflow_trace import TraceError, trace_id_of
from tasks.agents.openinference import trajectory_from_openinference

FORMS = ("expected chat messages [{role, content, tool_calls?}, ...], an MLflow trace (or a "
         "list of them, one per turn), an OpenInference/OpenTelemetry span export, or "
         "{'steps': [...]}")


def _is_mlflow_trace(value: Any) -> bool:
    return isinstance(value, Mapping) and ("info" in value or isinstance(value.get("data"),
                                                                         Mapping))


def _is_message(value: Any) -> bool:
    return isinstance(value, Mapping) and "role" in value


def decoded_cell(value: Any) -> Any:
    """A cell as a value: JSON text decoded, anything else as it is.

    Raises:
        AgentRunError: the text is not JSON, or nests deeper than it can be read.
    """
    if not isinstance(value, str | bytes | bytearray):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise AgentRunError(f"trajectory is not valid JSON: {exc}") from None
    except RecursionError:
        raise AgentRunError(too_deep("trajectory")) from None


def read_trajectory(value: Any) -> Trajectory:
    """The trajectory a cell holds (JSON text, or the value `decoded_cell` made of it).

    Raises:
        AgentRunError: the cell is none of the forms, or the reader names what is malformed.
    """
    value = decoded_cell(value)
    try:
        return _read(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise AgentRunError(f"trajectory {where}: {first['msg']}") from None
    except TraceError as error:
        raise AgentRunError(f"trajectory: {error}") from None
    except RecursionError:  # a value nested past what the readers walk: this row's problem
        raise AgentRunError(too_deep("trajectory")) from None


def _read(value: Any) -> Trajectory:
    if isinstance(value, Mapping) and "steps" in value:
        return Trajectory.model_validate(value)
    if isinstance(value, list) and value and all(map(_is_message, value)):
        return trajectory_from_chat_messages(value)
    if _is_mlflow_trace(value) or (
            isinstance(value, list) and value and all(map(_is_mlflow_trace, value))):
        return trajectory_from_mlflow(value)
    if isinstance(value, list | Mapping) and value:
        return trajectory_from_openinference(value)
    raise AgentRunError(f"trajectory: {FORMS}; got {shown(value)}")


def mlflow_trace_id(value: Any) -> str | None:
    """The trace id of a cell that holds one MLflow trace (JSON text or object); else None.

    A list of traces (a session, one per turn) names several traces, so none is the row's.

    Raises:
        AgentRunError: the trace's id is not a plain MLflow trace id.
    """
    try:
        value = decoded_cell(value)
    except AgentRunError:
        return None
    if not _is_mlflow_trace(value):
        return None
    try:
        return trace_id_of(value)
    except TraceError as error:
        raise AgentRunError(f"trajectory: {error}") from None


def trajectory_problem(value: Any) -> str | None:
    """What is wrong with a trajectory cell, in words (None when it reads)."""
    error = refusal(read_trajectory, value, AgentRunError)
    return None if error is None else str(error)
