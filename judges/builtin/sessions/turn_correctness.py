"""turn_correctness: is each assistant turn right against what expected_turns says it should be?

Only turns that expected_turns gives an expectation are judged; the others are counted as
unjudged turns.
"""

from judges.builtin.sessions.specs import TurnJudgeSpec

JUDGE = TurnJudgeSpec(
    name="turn_correctness",
    kind="turn",
    requires=("session", "response", "turn_expected"),
    template="turn_correctness.j2",
    only_turns_with="expectation",
)
