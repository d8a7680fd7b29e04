"""chunk_relevance: is each retrieved chunk relevant to the request (precision = yes / judged)?"""

from judges.base import JudgeSpec

JUDGE = JudgeSpec(
    name="chunk_relevance",
    kind="retrieval",
    requires=("context",),
    template="chunk_relevance.j2",
    per_chunk=True,
)
