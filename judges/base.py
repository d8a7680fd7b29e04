"""What a judge is: a frozen spec, its prompt template and its output model."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field

from judges.blocks.delimiters import neutralised
from judges.rows import Chunk, EvalRow
from judges.trajectory.conversation import has_turn_context

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
SYSTEM_TEMPLATE = "_system.j2"

UNTRUSTED_BLOCK = re.compile(r"<untrusted-([\w-]+)>\n(.*?)\n</untrusted-\1>", re.DOTALL)


def untrusted_blocks(messages: list[dict]) -> list[str]:
    """The evaluated text inside every <untrusted-…> block of a call's messages."""
    return [
        match.group(2)
        for message in messages
        if isinstance(message.get("content"), str)
        for match in UNTRUSTED_BLOCK.finditer(message["content"])
    ]


def untrusted(text: object, label: str) -> str:
    """Wrap evaluated text in a block that the text itself cannot close.

    Anything in it that reads as one of the block's tags, look-alike and invisible characters
    included (judges/blocks/delimiters.py), is made inert.
    """
    body = neutralised("" if text is None else str(text))
    return f"<untrusted-{label}>\n{body}\n</untrusted-{label}>"


@cache
def prompt_environment() -> jinja2.Environment:
    """The one jinja2 environment for prompts: strict, and no HTML escaping (prompts are text)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(PROMPTS_DIR),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        auto_reload=False,  # templates don't change under a running process: no stat per call
    )
    env.filters["untrusted"] = untrusted
    return env


@cache
def template_hash(name: str) -> str:
    """sha256 over a template and the shared partials it may include."""
    digest = hashlib.sha256()
    for path in sorted(PROMPTS_DIR.glob("_*.j2")) + [PROMPTS_DIR / name]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class BinaryVerdict(BaseModel):
    """A yes/no judgment with its reasoning: the reply every binary judge must give."""

    # The schema sent as response_format forbids other keys; a reply that adds one anyway
    # (a score, a confidence) still carries a usable verdict, so parsing ignores them.
    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": False})

    rationale: str = Field(description="One or two sentences explaining the verdict")
    rating: Literal["yes", "no"] = Field(description='"yes" or "no", as the instructions define')

    def verdict_key(self) -> str:
        """What two replies must share to be the same judgment: the rating."""
        return self.rating


JudgeKind = Literal["answer", "retrieval", "deterministic", "agent", "session", "turn",
                   "pairwise"]
JudgeMode = Literal["answer", "per_chunk", "deterministic", "per_turn", "pairwise"]
# What one verdict is about: a row (once, or per chunk or turn), or a pair judged in both orders.
JudgeUnit = Literal["row", "pair"]
Requirement = Literal["response", "expected", "context", "expected_context",
                      "expected_tool_calls", "agent_run", "session", "turn_context",
                      "turn_expected", "pair"]
TOOL_CALLS_AREA = "agent/tool_calls"  # every tool-call judge, deterministic or not
# Where each kind's per-row fields and run metrics are published.
KIND_AREAS: dict[str, str] = {
    "answer": "response/llm_judged",
    "retrieval": "retrieval/llm_judged",
    "deterministic": TOOL_CALLS_AREA,
    "agent": "agent/llm_judged",
    "session": "session/llm_judged",
    "turn": "turn/llm_judged",
    "pairwise": "pairwise",  # the one pairwise judge of a run: its fields are the area's
}

REQUIREMENT_TESTS: dict[str, Callable[[EvalRow], bool]] = {
    "response": lambda row: row.response is not None,
    "expected": lambda row: row.has_expected,
    "context": lambda row: bool(row.chunks_with_content),
    "expected_context": lambda row: bool(row.expected_retrieved_context),
    "expected_tool_calls": lambda row: row.expected_tool_calls is not None,
    "agent_run": lambda row: row.is_agent_run,
    "session": lambda row: row.is_session,
    "turn_context": lambda row: has_turn_context(row.trajectory),
    "turn_expected": lambda row: any(e is not None for e in row.expected_turns or ()),
    # A row alone is never a pair: pairs are read as pairs (tasks/dataset/pairs.py) or made
    # of a regression's row and its baseline's answer (flows/phases/head_to_head.py).
    "pair": lambda row: False,
}
REQUIREMENT_COLUMNS: dict[str, str] = {
    "response": "response (or trace)",
    "expected": "expected_response or expected_facts",
    "context": "retrieved_context[].content (or trace)",
    "expected_context": "expected_retrieved_context[].doc_uri",
    "expected_tool_calls": "expected_tool_calls",
    "agent_run": "a trajectory (or trace) with tool calls",
    "session": "a conversation of two or more user turns",
    "turn_context": "a conversation turn with retrieved documents",
    "turn_expected": "expected_turns",
    "pair": "a prompt and two responses (a pairs file, or a baseline and a candidate)",
}


def judge_messages(template: str, context: dict) -> list[dict]:
    """The shared system prompt and `template` rendered with `context`, as chat messages."""
    env = prompt_environment()
    user = env.get_template(template).render(**context)
    system = env.get_template(SYSTEM_TEMPLATE).render()
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class MetricSpec:
    """A per-row number and its run-level average."""

    name: str
    field: str
    compute: Callable[[EvalRow], float | None]
    needs: str
    # Read from the candidate's generation when judgeflow generates the responses: a row whose
    # generation failed has no value and is an error of the metric, not a row it skips.
    from_response: bool = False
    # Why a row that has no value should have had one (None: the row is simply not measured):
    # such a row is an error of the metric (its error_count and error share), never left out
    # unseen, e.g. a row expecting tool calls that records none to compare.
    error: Callable[[EvalRow], str | None] | None = None
    # What the registry of published metrics (judges/catalogue.py) says of its average.
    kind: Literal["average", "tool_call", "latency"] = "average"
    direction: Literal["higher", "lower"] = "higher"


@dataclass(frozen=True)
class JudgeSpec:
    """A built-in or custom LLM judge.

    Attributes:
        name: the judge's name in output fields.
        kind: "answer" writes response/llm_judged/..., "retrieval" retrieval/llm_judged/...
        per_chunk: one call per retrieved chunk (ratings arrays and precision) or one per row.
        requires: inputs a row must have to be judged.
        template: the prompt template file under prompts/.
        version: bumped whenever the prompt's meaning changes.
        aggregate: "percentage" or "average" for the rating's run-level metric.
        area: where its fields go when not its kind's area (tool-call judges of any kind
            share `agent/tool_calls`, the name DESIGN.md keeps).
        field_name: its name in output fields when not `name`.
        unit: what one verdict is about: a row (the default), or a pair of responses to one
            prompt judged in both orders and reconciled (the pairwise judge,
            judges/builtin/pairwise.py); a pair judge publishes its fields in its area itself.
    """

    name: str
    kind: JudgeKind
    requires: tuple[Requirement, ...]
    template: str
    version: int = 1
    per_chunk: bool = False
    aggregate: Literal["percentage", "average"] = "percentage"
    area: str | None = None
    field_name: str | None = None
    unit: JudgeUnit = "row"

    @property
    def prefix(self) -> str:
        """Where its output fields go, e.g. `response/llm_judged/{name}`; a pair judge's area."""
        area = self.area or KIND_AREAS[self.kind]
        return area if self.unit == "pair" else f"{area}/{self.field_name or self.name}"

    @property
    def mode(self) -> JudgeMode:
        """How the engine runs it: one call per row, one per retrieved chunk, or per pair."""
        if self.unit == "pair":
            return "pairwise"
        return "per_chunk" if self.per_chunk else "answer"

    @property
    def samples(self) -> int:
        """Independent samples per row; more than one makes the verdict a majority vote."""
        return 1

    @property
    def records_samples(self) -> bool:
        """Whether each sample's rating is published (`…/verdicts`)."""
        return False

    def applies_to(self, row: EvalRow) -> bool:
        """Whether the row has every input the judge requires."""
        return all(REQUIREMENT_TESTS[need](row) for need in self.requires)

    @property
    def needs_response(self) -> bool:
        """Whether the judge reads the response (so a failed generation is its error)."""
        return "response" in self.requires

    def missing_inputs(self) -> str:
        """The columns it requires, in words, for the reason a judge was skipped."""
        return " and ".join(REQUIREMENT_COLUMNS[need] for need in self.requires)

    def template_context(self, row: EvalRow, chunk: Chunk | None) -> dict:
        """The variables this judge's template is rendered with."""
        return {"row": row, "chunk": chunk}

    def render(self, row: EvalRow, chunk: Chunk | None = None) -> list[dict]:
        """The chat messages for one call: the shared system prompt and this judge's prompt."""
        return judge_messages(self.template, self.template_context(row, chunk))

    def call_count(self, row: EvalRow) -> int:
        """The model calls one row costs: one per sample, per chunk for a per-chunk judge."""
        return self.samples * (len(row.chunks_with_content) if self.per_chunk else 1)

    def prompts(self, row: EvalRow) -> list[list[dict]]:
        """Every distinct prompt the judge sends for the row (each sent `samples` times)."""
        return [self.render(row, chunk)
                for chunk in (row.chunks_with_content if self.per_chunk else [None])]

    @property
    def prompt_hash(self) -> str:
        """Hash of its prompt template, recorded in the manifest and part of the cache key."""
        return template_hash(self.template)

    def manifest_entry(self) -> dict:
        """Its provenance, as the manifest's `judges` section records every judge.

        A pair judge's entry has no prefix: compare runs published it without one (its fields
        are its area's), and a published manifest keeps its shape.
        """
        entry = {"name": self.name, "prefix": self.prefix, "kind": self.kind,
                 "per_chunk": self.per_chunk, "version": self.version,
                 "template": self.template, "prompt_hash": self.prompt_hash}
        if self.unit == "pair":
            del entry["prefix"]
        return entry
