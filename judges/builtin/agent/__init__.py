"""The LLM judges of agent runs: tool_call_correctness, tool_call_efficiency, goal_success.

Each reads the user's request and the whole trajectory as `render_for_judge` writes it (every
step, tool-only steps and tool errors included), both as untrusted blocks after the static
instructions, and answers yes/no with a rationale under `agent/tool_calls/{name}/...` (the
tool-call judges) or `agent/llm_judged/goal_success/...`. They run by default on rows that
record an agent at work (the "agent_run" requirement) and are skipped, with a reason, on sets
without one. spec.py is their shared spec; offline_rules.py gives the
offline judge (`judgeflow/offline`) a deterministic heuristic for each. A sub-package rather than
five more modules in judges/builtin/, which would reach its limit of 16. May import judges/
top-level modules, judges/trajectory and judges.builtin.offline.
"""

from judges.builtin.agent import (
    goal_success,
    offline_rules,  # noqa: F401 - registers the three judges' offline heuristics
    tool_call_correctness,
    tool_call_efficiency,
)

AGENT_JUDGES = (tool_call_correctness.JUDGE, tool_call_efficiency.JUDGE, goal_success.JUDGE)
