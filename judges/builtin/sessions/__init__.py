"""Judges of sessions: the whole conversation (kind "session") and each assistant turn ("turn").

One module per judge, the judge specs they share (specs.py) and their offline heuristics
(offline_rules.py, registered into the offline judge's OFFLINE_RULES on import).
"""

from judges.builtin.sessions import (
    conversation_completeness,
    knowledge_retention,
    offline_rules,  # noqa: F401 - registers the session and turn offline rules
    turn_correctness,
    turn_groundedness,
    turn_relevance,
)

JUDGES = tuple(module.JUDGE for module in (
    conversation_completeness, knowledge_retention, turn_relevance, turn_groundedness,
    turn_correctness))
