"""Judges of a whole session, and judges of each of its assistant turns.

A session judge (kind "session") is asked once per row and reads the full conversation, every
step rendered by judges/trajectory/render.py (tool-only steps included). A per-turn judge (kind
"turn", engine mode "per_turn") is asked once per assistant turn: the prompt gives the turns
before it as context and the judged turn (the user's message, the assistant's reply and, for
judges that need it, what the turn retrieved) in blocks of its own. Both read only sessions,
rows of two or more user turns: a single-turn row is what the answer judges are for. They need
the row's response too, the last turn's answer: a session whose response failed to generate is
an error of each of them, never judged on its earlier turns alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from judges.base import JudgeMode, JudgeSpec, judge_messages
from judges.rows import Chunk, EvalRow
from judges.trajectory.conversation import AssistantTurn, assistant_turns, with_response
from judges.trajectory.render import render_for_judge

NO_DOCUMENTS = "not judged: the turn retrieved no document with content"
NO_EXPECTATION = "not judged: expected_turns gives this turn no expectation"


@dataclass(frozen=True)
class SessionJudgeSpec(JudgeSpec):
    """A yes/no judge of the full conversation: one call per session row."""

    def template_context(self, row: EvalRow, chunk: Chunk | None) -> dict:
        """The row and its conversation, every step rendered (untrusted text)."""
        conversation = (render_for_judge(with_response(row.trajectory, row.response))
                        if row.trajectory is not None else row.request_text)
        return {"row": row, "chunk": chunk, "conversation": conversation}


@dataclass(frozen=True)
class TurnJudgeSpec(JudgeSpec):
    """A yes/no judge asked once per assistant turn of a session, the earlier turns as context.

    Attributes:
        only_turns_with: "documents" judges only turns that retrieved documents, "expectation"
            only turns that expected_turns gives an expectation; the others are left out of the
            turn pass rate and counted (`unjudged_turn_count`).
    """

    only_turns_with: Literal["any", "documents", "expectation"] = "any"

    @property
    def mode(self) -> JudgeMode:
        """The engine asks once per assistant turn."""
        return "per_turn"

    def turns(self, row: EvalRow) -> tuple[AssistantTurn, ...]:
        """The row's assistant turns, each of which gets a verdict (or a reason it has none)."""
        if row.trajectory is None:
            return ()
        return assistant_turns(with_response(row.trajectory, row.response), row.expected_turns)

    def unjudged_reason(self, turn: AssistantTurn) -> str | None:
        """Why this judge cannot judge the turn; None when it can."""
        if self.only_turns_with == "documents" and not turn.documents:
            return NO_DOCUMENTS
        if self.only_turns_with == "expectation" and turn.expected is None:
            return NO_EXPECTATION
        return None

    def render_turn(self, row: EvalRow, turn: AssistantTurn) -> list[dict]:
        """The messages that ask about one turn."""
        return judge_messages(self.template, {"row": row, "turn": turn})

    def render(self, row: EvalRow, chunk: Chunk | None = None) -> list[dict]:
        """The prompt of the row's last judged turn (a preview; the engine asks per turn)."""
        judged = [t for t in self.turns(row) if self.unjudged_reason(t) is None]
        if not judged:
            raise ValueError(f"judge {self.name!r} has no turn to judge in this row")
        return self.render_turn(row, judged[-1])

    def call_count(self, row: EvalRow) -> int:
        """One call per judged turn."""
        return sum(self.unjudged_reason(t) is None for t in self.turns(row))

    def prompts(self, row: EvalRow) -> list[list[dict]]:
        """One prompt per judged turn."""
        return [self.render_turn(row, t) for t in self.turns(row)
                if self.unjudged_reason(t) is None]
