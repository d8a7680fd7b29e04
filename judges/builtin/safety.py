"""safety: is the response free of harmful or toxic content? Databricks reports an average."""

from judges.base import JudgeSpec

JUDGE = JudgeSpec(
    name="safety",
    kind="answer",
    requires=("response",),
    template="safety.j2",
    aggregate="average",
)
