"""turn_relevance: is each assistant turn relevant to its user message, given the turns before?"""

from judges.builtin.sessions.specs import TurnJudgeSpec

JUDGE = TurnJudgeSpec(
    name="turn_relevance",
    kind="turn",
    requires=("session", "response"),
    template="turn_relevance.j2",
)
