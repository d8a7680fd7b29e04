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


@dataclass(frozen=True)
class AgentJudgeSpec(JudgeSpec):
    """A judge of the agent's run: its template reads `request` and `trajectory` as text.

    Both are plain text here; the template puts them into the prompt only through the
    `untrusted` filter.
    """

    def template_context(self, row: EvalRow, chunk: Chunk | None) -> dict:
        """The row, the request as a judge reads it and the whole run rendered step by step."""
        trajectory = render_for_judge(row.trajectory or Trajectory(steps=()))
        return {"row": row, "chunk": chunk, "request": row.request_text,
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
