"""tool_call_efficiency: were the calls needed, with none redundant or repeated without reason?"""

from judges.base import TOOL_CALLS_AREA
from judges.builtin.agent.spec import AgentJudgeSpec

JUDGE = AgentJudgeSpec(
    name="tool_call_efficiency",
    kind="agent",
    area=TOOL_CALLS_AREA,
    requires=("agent_run",),
    template="tool_call_efficiency.j2",
)
