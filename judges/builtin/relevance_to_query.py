"""relevance_to_query: does the response address the request?"""

from judges.base import JudgeSpec

JUDGE = JudgeSpec(
    name="relevance_to_query",
    kind="answer",
    requires=("response",),
    template="relevance_to_query.j2",
)
