"""Validated records as EvalRow: request as chat messages, trace facts folded in, ids assigned."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ValidationError

from judges.rows import EvalRow, Message
from judges.trajectory.conversation import assistant_turns, with_response
from judges.trajectory.expected import ExpectedToolCalls
from judges.trajectory.model import Trajectory
from tasks.agents.chat_messages import trajectory_from_chat_messages
from tasks.agents.errors import AgentRunError, too_deep
from tasks.dataset.cell_readings import CellReadings
from tasks.dataset.chat import request_messages
from tasks.dataset.columns import KNOWN_COLUMNS
from tasks.dataset.table import RowProblem


def stable_request_id(request: Any) -> str:
    """A request's id when none is given: a hash of its canonical JSON (stable across runs)."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False)
    return "req-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _trace_fields(record: dict, readings: CellReadings) -> dict:
    """Fields derived from the trace; columns given explicitly win.

    The trace's id is the row's `trace_id` (the trajectory's, when that is one MLflow trace and
    the row has no trace column): the trace the row's verdicts are attached to in MLflow.
    """
    if record.get("trace") is None:
        cell = record.get("trajectory")
        trace_id = None if cell is None else readings.trajectory_trace_id(cell)
        return {} if trace_id is None else {"trace_id": trace_id}
    facts = readings.trace_facts(record["trace"])
    derived = {
        "response": facts.response,
        "retrieved_context": facts.retrieved_context,
        "total_token_count": facts.total_tokens,
        "total_input_token_count": facts.total_input_tokens,
        "total_output_token_count": facts.total_output_tokens,
        "latency_seconds": facts.latency_seconds,
    }
    fields = {k: v for k, v in derived.items() if v is not None and record.get(k) is None}
    return fields if facts.trace_id is None else {**fields, "trace_id": facts.trace_id}


# Read from their own cells (trajectory, expected_tool_calls) or derived from the trace.
_DERIVED_COLUMNS = ("trace", "trajectory", "expected_tool_calls")


def _is_session(messages: list[dict]) -> bool:
    """Several user turns, or tool calls, read from the messages as given.

    Before any validation: most rows hold one question, and validating their messages only to
    find that out was a fifth of what normalising such a row costs.
    """
    if not all(isinstance(m, dict) for m in messages):
        return True  # not messages at all: Message's validation says what is wrong
    users = sum(m.get("role") == "user" for m in messages)
    return users >= 2 or any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)


def _conversation(messages: list[dict], response: str | None) -> Trajectory | None:
    """A request that is itself a session (several user turns, or tool calls), as steps.

    The row's response is the assistant's last turn. A one-message request is not a
    conversation: its judges read it as they always have.
    """
    if not _is_session(messages):
        return None
    # The request's messages as given (dicts); through Message so that null keys read as absent.
    raw = [Message.model_validate(m).model_dump(exclude_none=True) for m in messages]
    if response is not None:
        raw.append({"role": "assistant", "content": response})
    try:
        return trajectory_from_chat_messages(raw)
    except AgentRunError:
        # The request was always judged as messages; one whose tool calls are too incomplete
        # to read as steps stays that, and the agent judges say no row has a run.
        return None


def _agent_fields(record: dict, messages: list[dict], response: str | None,
                  readings: CellReadings) -> dict:
    """The row's trajectory and expected tool calls.

    The trajectory is the row's own cell, else its trace's spans, else its request's messages;
    a response missing from the record is the run's last answer.
    """
    fields: dict = {}
    if record.get("expected_tool_calls") is not None:
        fields["expected_tool_calls"] = ExpectedToolCalls.from_cell(record["expected_tool_calls"])
    if record.get("trajectory") is not None:
        trajectory = readings.trajectory(record["trajectory"])
    elif record.get("trace") is not None:
        trajectory = readings.trace_trajectory(record["trace"])
    else:
        trajectory = _conversation(messages, response)
    if trajectory is not None:
        fields["trajectory"] = trajectory
        if response is None and trajectory.final_response() is not None:
            fields["response"] = trajectory.final_response()
    return fields


def conversation_before_answer(trajectory: Trajectory) -> list[dict]:
    """The messages the final answer responds to: every user and assistant text before it.

    What a judge of the final answer must read as the request of a session, so that a
    follow-up ("Yes, tell me more") is read with the turn it follows.
    """
    spoken = [step for step in trajectory.steps
              if step.kind == "user_message" or step.kind in ("assistant_message", "tool_call")
              and (step.text or "").strip()]
    last_user = max((i for i, step in enumerate(spoken) if step.kind == "user_message"),
                    default=len(spoken) - 1)
    return [{"role": "user" if step.kind == "user_message" else "assistant",
             "content": step.text or ""} for step in spoken[:last_user + 1]]


class TurnCountError(ValueError):
    """expected_turns does not give one entry per assistant turn of the session."""


def _check_expected_turns(row: EvalRow) -> None:
    """expected_turns must line up with the session's assistant turns, or it means nothing."""
    if row.expected_turns is None:
        return
    # A response still to be generated answers the last turn: count it as an answer.
    answered = with_response(row.trajectory, row.response or "") if row.trajectory else None
    turns = len(assistant_turns(answered))
    if turns < 2:
        raise TurnCountError("expected_turns is for a session (two or more user turns with "
                             f"their answers); this row has {turns} assistant turn(s)")
    if len(row.expected_turns) != turns:
        raise TurnCountError(f"expected_turns has {len(row.expected_turns)} entries, the "
                             f"session {turns} assistant turns: give one entry (or null) each")


def normalise(row_index: int, record: dict, request_id: str,
              readings: CellReadings | None = None) -> EvalRow:
    """A validated record as an EvalRow (its trajectory and trace cells read by `readings`).

    Raises:
        ValidationError: a field that does not fit the row model.
        AgentRunError: a trajectory, trace or conversation that cannot be read.
        TurnCountError: expected_turns that do not line up with the session's turns.
    """
    known = {k: v for k, v in record.items()
             if k in KNOWN_COLUMNS and k not in _DERIVED_COLUMNS}
    extra = {k: v for k, v in record.items() if k not in KNOWN_COLUMNS}
    readings = CellReadings() if readings is None else readings
    fields = {**known, **_trace_fields(record, readings)}
    fields["request_id"] = request_id
    messages = request_messages(record["request"])
    fields.update(_agent_fields(record, messages, fields.get("response"), readings))
    session = fields.get("trajectory")
    if len(messages) == 1 and session is not None and session.turns() and sum(
            turn.user_message is not None for turn in session.turns()) >= 2:
        messages = conversation_before_answer(session)
    row = EvalRow(row_index=row_index, messages=messages, extra=extra, **fields)
    _check_expected_turns(row)
    return row


def _normalise_problem(
    index: int, request_id: str, record: dict, error: ValidationError
) -> RowProblem:
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "(row)"
    # Fields derived from a trace are reported against the trace column.
    column = field if field in record else "trace" if record.get("trace") else field
    where = ".".join(map(str, first["loc"]))
    return RowProblem(index, request_id, column, f"{where}: {first['msg']}")


def _assign_request_ids(records: dict[int, dict], seen: dict[str, int]) -> dict[int, str]:
    ids = {}
    for index, record in records.items():
        given = record.get("request_id")
        if given is not None:
            ids[index] = given
            continue
        derived = stable_request_id(record["request"])
        # Identical requests without ids stay distinct, numbered in order of appearance.
        seen[derived] = seen.get(derived, 0) + 1
        ids[index] = derived if seen[derived] == 1 else f"{derived}-{seen[derived]}"
    return ids


def normalise_rows(
    valid: dict[int, dict], seen: dict[str, int] | None = None,
    readings: CellReadings | None = None,
) -> tuple[list[EvalRow], list[RowProblem]]:
    """EvalRows of the records that passed validation, and the few that fail to normalise.

    A record can pass validation and still fail here, e.g. a trace whose documents lack a
    doc_uri.

    Args:
        valid: records by row index, in order.
        seen: how often each derived request id has occurred so far; a set read in batches
            passes the same dict for every batch, so that repeated requests are numbered
            across the whole set.
        readings: what the column checks already read of the batch's trajectory and trace
            cells (each is read once).
    """
    ids = _assign_request_ids(valid, {} if seen is None else seen)
    readings = CellReadings() if readings is None else readings
    rows, problems = [], []
    for index, record in valid.items():
        try:
            rows.append(normalise(index, record, ids[index], readings))
        except ValidationError as error:
            problems.append(_normalise_problem(index, ids[index], record, error))
        except TurnCountError as error:
            problems.append(RowProblem(index, ids[index], "expected_turns", str(error)))
        except AgentRunError as error:
            column = next(c for c in ("trajectory", "trace", "request") if record.get(c))
            problems.append(RowProblem(index, ids[index], column, str(error)))
        except RecursionError:  # a value nested past what a reader walks: this row's problem
            column = next((c for c in ("trajectory", "trace") if record.get(c)), "(row)")
            problems.append(RowProblem(index, ids[index], column, too_deep(column)))
    return rows, problems
