"""tool_call_correctness: was each call's tool and arguments right, given what came before?"""

from judges.base import TOOL_CALLS_AREA
from judges.builtin.agent.spec import AgentJudgeSpec

JUDGE = AgentJudgeSpec(
    name="tool_call_correctness",
    kind="agent",
    area=TOOL_CALLS_AREA,
    requires=("agent_run",),
    template="tool_call_correctness.j2",
)
