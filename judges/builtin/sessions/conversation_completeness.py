"""conversation_completeness: was every request the user made addressed by the session's end?"""

from judges.builtin.sessions.specs import SessionJudgeSpec

JUDGE = SessionJudgeSpec(
    name="conversation_completeness",
    kind="session",
    requires=("session", "response"),
    template="conversation_completeness.j2",
)
