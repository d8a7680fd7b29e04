"""A session's assistant turns, as the per-turn judges read them.

An assistant turn is a user message and what the assistant did in reply (its messages, tool
calls, retrievals) up to the next user message. A user message the assistant never answered
(the conversation ends on it) is no assistant turn, and neither are steps before the first user
message (a system prompt): there is nothing to judge in them. Each turn keeps everything before
it as its context, so a judge of turn k reads turns 1..k-1 too.
"""

from __future__ import annotations

from typing import NamedTuple

from judges.trajectory.model import Document, Step, Trajectory
from judges.trajectory.render import render_for_judge

NO_EARLIER_TURNS = "(this is the first turn of the conversation)"
NO_TEXT_REPLY = "(the assistant gave no text reply in this turn)"
_REPLY_KINDS = ("assistant_message", "tool_call")


class AssistantTurn(NamedTuple):
    """One assistant turn of a session.

    Attributes:
        number: its position among the session's assistant turns, from 1.
        earlier: every step before its user message (the context it is judged in).
        user_message: what the user said.
        steps: what followed, up to the next user message.
    """

    number: int
    earlier: tuple[Step, ...]
    user_message: str
    steps: tuple[Step, ...]

    @property
    def reply(self) -> str:
        """What the assistant said in the turn, its messages joined in order."""
        texts = [s.text for s in self.steps if s.kind in _REPLY_KINDS and s.text]
        return "\n\n".join(texts) if texts else NO_TEXT_REPLY

    @property
    def documents(self) -> tuple[Document, ...]:
        """The documents with content that the turn's retrieval steps returned."""
        return tuple(doc for step in self.steps if step.kind == "retrieval"
                     for doc in step.documents if doc.content)

    @property
    def earlier_text(self) -> str:
        """The conversation before this turn, rendered for a judge (untrusted text)."""
        if not self.earlier:
            return NO_EARLIER_TURNS
        return render_for_judge(Trajectory(steps=self.earlier))


def assistant_turns(trajectory: Trajectory | None) -> tuple[AssistantTurn, ...]:
    """The session's assistant turns, in order (none for a row without a trajectory)."""
    if trajectory is None:
        return ()
    turns: list[AssistantTurn] = []
    done: list[Step] = []
    for turn in trajectory.turns():
        answered = any(step.kind in _REPLY_KINDS for step in turn.steps)
        if turn.user_message is not None and answered:
            turns.append(AssistantTurn(len(turns) + 1, tuple(done),
                                       turn.user_message.text or "", turn.steps))
        done += ([turn.user_message] if turn.user_message is not None else []) + list(turn.steps)
    return tuple(turns)


def has_turn_context(trajectory: Trajectory | None) -> bool:
    """Whether some assistant turn retrieved a document with content."""
    return any(turn.documents for turn in assistant_turns(trajectory))
