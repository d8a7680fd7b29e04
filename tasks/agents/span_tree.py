"""From spans to steps: one walk of the span tree, the same for every span convention.

- Each root span (no parent in the input) is one turn: its request's user message opens the
  turn, its descendants' steps follow, and its output closes the turn as the assistant's answer
  unless the last model call already said exactly that.
- Siblings are taken in start-time order, depth first, so a sub-agent's steps follow the step
  that invoked it.
- A tool, model call or retrieval is one step: the spans inside it are its own implementation
  (a tool wrapping another tool, an HTTP span under a model call), so they add no step and a
  tool call is never counted twice.
- A tool span answers the call a model call announced (same call id, else same name and
  arguments, else same name, oldest first: pending_calls.py, each a lookup); a tool span no
  model call announced is shown as the assistant's call followed by its result, so
  `Trajectory.tool_calls()` holds every call once.
- Spans are walked with a stack, not recursion, and nested at most MAX_SPAN_DEPTH deep.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from judges.trajectory.model import Step, Trajectory
from tasks.agents.errors import MAX_SPAN_DEPTH, AgentRunError
from tasks.agents.pending_calls import PendingCalls
from tasks.agents.span_facts import SpanFacts

_WHOLE_STEP_ROLES = ("tool", "llm", "retriever")


def trajectory_from_spans(spans: Sequence[SpanFacts]) -> Trajectory:
    """The trajectory of a set of spans (one trace, or several traces' roots in time order).

    Raises:
        AgentRunError: when two spans share an id or parent ids form a cycle.
    """
    children = _children_by_parent(spans)
    roots = _in_order(s for s in spans if s.parent_id is None or s.parent_id not in children)
    _refuse_unreachable(spans, roots, children)
    walk = _Walk(children)
    for root in roots:
        walk.turn(root)
    return Trajectory(steps=tuple(walk.steps))


def _children_by_parent(spans: Sequence[SpanFacts]) -> dict[str, list[SpanFacts]]:
    """Every span id, mapped to its children (in start order)."""
    children: dict[str, list[SpanFacts]] = {}
    for span in spans:
        if span.span_id is None:
            continue
        if span.span_id in children:
            first = next(s for s in spans if s.span_id == span.span_id)
            raise AgentRunError(
                f"{span.where}: span id {span.span_id!r} is also the id of {first.where}")
        children[span.span_id] = []
    for span in spans:
        if span.parent_id is not None and span.parent_id in children:
            children[span.parent_id].append(span)
    return {span_id: _in_order(kids) for span_id, kids in children.items()}


def _in_order(spans: Iterable[SpanFacts]) -> list[SpanFacts]:
    return sorted(spans, key=lambda s: (
        -math.inf if s.start_time_ns is None else s.start_time_ns, s.index))


def _refuse_unreachable(spans: Sequence[SpanFacts], roots: list[SpanFacts],
                        children: dict[str, list[SpanFacts]]) -> None:
    reached, stack = set(), list(roots)
    while stack:
        span = stack.pop()
        reached.add(span.index)
        stack += children.get(span.span_id, []) if span.span_id else []
    lost = [span for span in spans if span.index not in reached]
    if lost:
        raise AgentRunError(f"{lost[0].where}: its parent ids never reach a root span (they "
                            "form a cycle), so it cannot be placed in the run")


class _Walk:
    """The steps so far, and the tool calls announced but not yet answered."""

    def __init__(self, children: dict[str, list[SpanFacts]]):
        self.children = children
        self.steps: list[Step] = []
        self.pending = PendingCalls()

    def turn(self, root: SpanFacts) -> None:
        first = len(self.steps)
        if root.request is not None:
            self.add(Step(kind="user_message", text=root.request, source_id=root.span_id,
                          start_time_ns=root.start_time_ns))
        if root.role in _WHOLE_STEP_ROLES:
            self.span(root)
            return
        self.descendants(root)
        last = self.steps[-1] if len(self.steps) > first else None
        answer = root.response
        if answer and answer.strip() and not (
                last and last.kind == "assistant_message" and (last.text or "").strip()
                == answer.strip()):
            self.add(Step(kind="assistant_message", text=answer, source_id=root.span_id,
                          end_time_ns=root.end_time_ns))
        if root.is_error:
            self.add(Step(kind="agent", name=root.name, result=root.error_text, is_error=True,
                          **_timing(root)))

    def descendants(self, span: SpanFacts) -> None:
        """The steps of the spans under `span`, depth first: a loop, not recursion."""
        stack = [(child, 1) for child in reversed(self._children_of(span))]
        while stack:
            child, depth = stack.pop()
            if depth > MAX_SPAN_DEPTH:
                raise AgentRunError(
                    f"{child.where} is nested more than {MAX_SPAN_DEPTH:,} spans deep under "
                    f"its root span; a trace may nest spans at most {MAX_SPAN_DEPTH:,} deep")
            if self.span(child):
                stack += [(kid, depth + 1) for kid in reversed(self._children_of(child))]

    def _children_of(self, span: SpanFacts) -> list[SpanFacts]:
        return self.children.get(span.span_id, []) if span.span_id else []

    def span(self, span: SpanFacts) -> bool:
        """Add the span's step; whether its children add theirs (a tool's, a model's do not)."""
        if span.role == "tool":
            self.tool(span)
        elif span.role == "llm":
            self.add(self.model_call(span))
        elif span.role == "retriever":
            shown_as_text = None if span.documents else span.response
            self.add(Step(kind="retrieval", name=span.name, text=span.request,
                          documents=span.documents, result=_outcome(span, shown_as_text),
                          is_error=span.is_error, **_timing(span)))
        else:
            if span.role == "agent":
                self.add(Step(kind="agent", name=span.name, text=span.request,
                              result=_outcome(span, span.response), is_error=span.is_error,
                              **_timing(span)))
            return True
        return False

    def tool(self, span: SpanFacts) -> None:
        call = span.call
        announced = self.pending.take(call)
        if announced is None:  # shown as the assistant's call, already answered
            self.steps.append(Step(kind="tool_call", tool_calls=(call,), source_id=span.span_id,
                                   start_time_ns=span.start_time_ns))
        call_id = (announced.call_id if announced else None) or call.call_id
        self.add(Step(kind="tool_result", name=call.name, call_id=call_id,
                      result=_outcome(span, span.response), is_error=span.is_error,
                      **_timing(span)))

    def model_call(self, span: SpanFacts) -> Step:
        if span.assistant is not None:
            return span.assistant.model_copy(update={"is_error": span.is_error, **_timing(span)})
        return Step(kind="llm_call", name=span.name, result=_outcome(span, span.response),
                    is_error=span.is_error, **_timing(span))

    def add(self, step: Step) -> None:
        """Append a step; the calls it announces wait for the tool spans that answer them."""
        self.steps.append(step)
        for call in step.tool_calls:
            self.pending.add(call)


def _outcome(span: SpanFacts, response: str | None) -> str | None:
    """What a span returned; for a failed span, why it failed (its output when it says none)."""
    return (span.error_text or response) if span.is_error else response


def _timing(span: SpanFacts) -> dict:
    return {"start_time_ns": span.start_time_ns, "end_time_ns": span.end_time_ns,
            "source_id": span.span_id}
