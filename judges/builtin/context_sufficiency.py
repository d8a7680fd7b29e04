"""context_sufficiency: does the retrieved context hold everything the expected answer needs?"""

from judges.base import JudgeSpec

JUDGE = JudgeSpec(
    name="context_sufficiency",
    kind="retrieval",
    requires=("expected", "context"),
    template="context_sufficiency.j2",
)
