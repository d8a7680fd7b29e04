"""goal_success: did the run reach the user's goal, its tool errors recovered or reported?"""

from judges.builtin.agent.spec import AgentJudgeSpec

JUDGE = AgentJudgeSpec(
    name="goal_success",
    kind="agent",
    requires=("agent_run",),
    template="goal_success.j2",
)
