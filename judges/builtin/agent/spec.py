"""What the agent judges share: the variables their templates read, and their prompt hash."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache

from judges.base import PROMPTS_DIR, JudgeSpec, template_hash
from judges.rows import Chunk, EvalRow
from judges.trajectory.model import Trajectory
from judges.trajectory.render import render_for_judge

# How to read a rendered run, included by every agent judge's template. Not an `_*.j2` partial:
# those enter every judge's template hash, and adding one would change every judge's cache key.
RUN_FORMAT = "agent/run_format.j2"


def agent_request(row: EvalRow) -> str:
    """The user's request as an agent judge reads it.

    A request of several messages whose last user message the run shows is the run itself (a
    conversation, tool calls and results): its last user message is the request, and the run
    shows the rest in order. Flattened into the request block, the run's later results would
    read as things the user said before the calls. Otherwise, the request as every judge reads it.
    """
    last_user = next((m.text for m in reversed(row.messages) if m.role == "user"), None)
    if len(row.messages) > 1 and last_user and row.trajectory is not None and any(
            step.kind == "user_message" and step.text == last_user
            for step in row.trajectory.steps):
        return last_user
    return row.request_text


@dataclass(frozen=True)
class AgentJudgeSpec(JudgeSpec):
    """A judge of the agent's run: its template reads `request` and `trajectory` as text.

    Both are plain text here; the template puts them into the prompt only through the
    `untrusted` filter.
    """

    def template_context(self, row: EvalRow, chunk: Chunk | None) -> dict:
        """The row, the user's request and the whole run rendered step by step."""
        trajectory = render_for_judge(row.trajectory or Trajectory(steps=()))
        return {"row": row, "chunk": chunk, "request": agent_request(row),
                "trajectory": trajectory}

    @property
    def prompt_hash(self) -> str:
        """Hash of its template and the run-format text it includes."""
        return _hash_with_run_format(self.template)


@cache
def _hash_with_run_format(template: str) -> str:
    """Asked for on every call: read and hashed once, like `template_hash`."""
    included = (PROMPTS_DIR / RUN_FORMAT).read_bytes()
    return hashlib.sha256(template_hash(template).encode() + b"\0" + included).hexdigest()[:16]
