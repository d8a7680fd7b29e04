"""groundedness: is the response supported by the retrieved context?"""

from judges.base import JudgeSpec

JUDGE = JudgeSpec(
    name="groundedness",
    kind="answer",
    requires=("response", "context"),
    template="groundedness.j2",
)
