"""knowledge_retention: did the assistant keep what the user said in earlier turns?"""

from judges.builtin.sessions.specs import SessionJudgeSpec

JUDGE = SessionJudgeSpec(
    name="knowledge_retention",
    kind="session",
    requires=("session", "response"),
    template="knowledge_retention.j2",
)
