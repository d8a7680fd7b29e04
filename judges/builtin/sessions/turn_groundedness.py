"""turn_groundedness: is each assistant turn supported by what that turn retrieved?

Only turns with retrieval steps are judged; the others are counted as unjudged turns.
"""

from judges.builtin.sessions.specs import TurnJudgeSpec

JUDGE = TurnJudgeSpec(
    name="turn_groundedness",
    kind="turn",
    requires=("session", "response", "turn_context"),
    template="turn_groundedness.j2",
    only_turns_with="documents",
)
