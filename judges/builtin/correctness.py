"""correctness: is the response accurate against expected_response or expected_facts?"""

from judges.base import JudgeSpec

JUDGE = JudgeSpec(
    name="correctness",
    kind="answer",
    requires=("response", "expected"),
    template="correctness.j2",
)
