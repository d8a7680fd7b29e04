"""Each trajectory and trace cell of a batch decoded and read once, for its check and its row.

A column check reads a cell to say what is wrong with it, and normalising the row reads it
again for its steps, its trace id or its facts. A 16 MiB trace costs seconds to decode and
walk, so what the check read (or the error it met) is kept for the row, keyed by the cell
object itself (held, so its id is not reused), and dropped with the batch. A cell the check
did not read (a set checked elsewhere) is read on first use, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from judges.trajectory.model import Trajectory
from tasks.agents.errors import AgentRunError, too_deep
from tasks.agents.mlflow_spans import trajectory_from_mlflow
from tasks.agents.mlflow_trace import TraceError, TraceFacts, parse_trace
from tasks.agents.read import decoded_cell, mlflow_trace_id, read_trajectory
from tasks.dataset.cells import trace_problem_text


class _Outcome(NamedTuple):
    """What reading one cell gave: values, or the error to raise again."""

    cell: Any  # held: the key is its id
    values: tuple[Any, ...]
    error: Exception | None

    def value(self, index: int) -> Any:
        """The reading's `index`th value; the error it met is raised again."""
        if self.error is not None:
            raise self.error
        return self.values[index]


class CellReadings:
    """The readings of a batch's trajectory and trace cells, each made once."""

    def __init__(self) -> None:
        self._trajectories: dict[int, _Outcome] = {}
        self._traces: dict[int, _Outcome] = {}

    def trajectory_problem(self, cell: Any) -> str | None:
        """The `trajectory` column's check (tasks/agents/read.py `trajectory_problem`)."""
        error = self._trajectory(cell).error
        return None if error is None else str(error)

    def trajectory(self, cell: Any) -> Trajectory:
        """A trajectory cell's steps.

        Raises:
            AgentRunError: as `read_trajectory` does.
        """
        return self._trajectory(cell).value(0)

    def trajectory_trace_id(self, cell: Any) -> str | None:
        """The trace id a trajectory cell of one MLflow trace names (None: none or several).

        Raises:
            AgentRunError: as `mlflow_trace_id` does.
        """
        found = self._trajectory(cell)
        if found.error is not None:  # not read: the id as mlflow_trace_id finds it
            return mlflow_trace_id(cell)
        trace_id, error = found.values[1:]
        if error is not None:
            raise error
        return trace_id

    def trace_problem(self, cell: Any) -> str | None:
        """The `trace` column's check (tasks/dataset/cells.py `trace_problem`)."""
        found = self._trace(cell)
        return trace_problem_text(found.error) if isinstance(found.error, TraceError) else None

    def trace_facts(self, cell: Any) -> TraceFacts:
        """A trace cell's facts (response, context, tokens, latency, id).

        Raises:
            TraceError: as `parse_trace` does.
        """
        found = self._trace(cell)
        if isinstance(found.error, TraceError):
            raise found.error
        return found.values[0]

    def trace_trajectory(self, cell: Any) -> Trajectory:
        """A trace cell's steps.

        Raises:
            AgentRunError: as `trajectory_from_mlflow` does.
        """
        return self._trace(cell).value(1)

    def clear(self) -> None:
        """Forget the batch's cells."""
        self._trajectories.clear()
        self._traces.clear()

    def _trajectory(self, cell: Any) -> _Outcome:
        return _read_once(self._trajectories, cell, _read_trajectory)

    def _trace(self, cell: Any) -> _Outcome:
        return _read_once(self._traces, cell, _read_trace)


def _read_once(kept: dict[int, _Outcome], cell: Any,
               read: Callable[[Any], _Outcome]) -> _Outcome:
    """The cell's reading from `kept`, made and kept on first use."""
    found = kept.get(id(cell))
    if found is None or found.cell is not cell:
        found = read(cell)
        kept[id(cell)] = found
    return found



def _read_trajectory(cell: Any) -> _Outcome:
    """A trajectory cell's steps and trace id (or the id's error) from one decoding."""
    try:
        value = decoded_cell(cell)
        trajectory = read_trajectory(value)
    except AgentRunError as error:
        return _Outcome(cell, (), error)
    try:
        return _Outcome(cell, (trajectory, mlflow_trace_id(value), None), None)
    except AgentRunError as error:
        return _Outcome(cell, (trajectory, None, error), None)


def _read_trace(cell: Any) -> _Outcome:
    """A trace cell's facts and steps from one decoding (its steps' error kept for the row)."""
    try:
        value = decoded_cell(cell)
    except AgentRunError as error:  # what parse_trace says of the same text
        return _Outcome(cell, (), _trace_error(cell, error))
    try:
        facts = parse_trace(value)
    except TraceError as error:
        return _Outcome(cell, (), error)
    try:
        return _Outcome(cell, (facts, trajectory_from_mlflow(value)), None)
    except AgentRunError as error:
        return _Outcome(cell, (facts,), error)
    except RecursionError:
        return _Outcome(cell, (facts,), AgentRunError(too_deep("trace")))


def _trace_error(cell: Any, error: AgentRunError) -> TraceError:
    try:
        parse_trace(cell)  # the text is not JSON: the parser's own words for it
    except TraceError as exact:
        return exact
    return TraceError(str(error))
