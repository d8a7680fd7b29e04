"""The judges judgeflow ships, one module each, and their registry.

Also the judges of agent runs (agent/), the deterministic metrics, aspect critics, custom judges
(templates rendered as data) and the offline heuristic judge. `BUILTIN_JUDGES` is the registry,
a plain dict. May import judges/ top-level modules, judges/model, judges/trajectory,
judges/pairwise (the pairwise judge) and judges/toolcalls (the tool-call judges).
"""

from judges.base import JudgeSpec
from judges.builtin import (
    agent,
    chunk_relevance,
    context_sufficiency,
    correctness,
    groundedness,
    offline,  # noqa: F401 - registers the offline judge as the local model judgeflow/offline
    relevance_to_query,
    safety,
    tool_calls,
)

BUILTIN_JUDGES: dict[str, JudgeSpec] = {
    module.JUDGE.name: module.JUDGE
    for module in (
        correctness,
        relevance_to_query,
        groundedness,
        safety,
        chunk_relevance,
        context_sufficiency,
    )
}
BUILTIN_JUDGES.update({judge.name: judge for judge in tool_calls.JUDGES})
BUILTIN_JUDGES.update({judge.name: judge for judge in agent.AGENT_JUDGES})

# Sessions (issue 25): judges of the whole conversation and of each assistant turn, applying
# only to rows of two or more user turns (their offline heuristics register on import).
from judges.builtin import sessions  # noqa: E402 - appended registrations

BUILTIN_JUDGES.update({judge.name: judge for judge in sessions.JUDGES})
