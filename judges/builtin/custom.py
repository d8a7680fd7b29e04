"""Custom judges from a YAML/JSON file: Databricks-style ANSWER or RETRIEVAL assessments.

The instructions are a jinja2 template over the row's fields. Each field is handed to it already
wrapped in its <untrusted-...> block, so a user's template cannot forget to delimit evaluated
text. In a RETRIEVAL judge `retrieved_context` is the one chunk being judged. `trajectory` is the
agent's whole run as `render_for_judge` writes it (every step, tool-only steps and tool errors
included); `conversation` is what the user and the assistant said, its messages only. A judge
naming either applies to the rows that record a run or conversation (a trajectory, a trace, or
a request that is itself a conversation); a set's own `conversation` column, if it has one,
keeps that name.

Templates are data, not code (judges/builtin/template_sandbox.py checks them when loaded and
renders them in jinja2's sandbox).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from judges.base import JudgeSpec, template_hash, untrusted
from judges.builtin.template_sandbox import (
    ROW_FIELDS,
    CustomJudgeError,
    compiled,
    referenced_fields,
)
from judges.rows import Chunk, EvalRow
from judges.storage import open_url
from judges.trajectory.model import Step, Trajectory
from judges.trajectory.render import render_for_judge

# Fields read from the row's trajectory, rendered for a judge.
RUN_FIELDS = ("trajectory", "conversation")
_RUN_FIELD_WORDS = {name: f"{name} (a trajectory, trace or conversation of messages)"
                    for name in RUN_FIELDS}
# The steps of a conversation: what was said, including the text of a step that also calls tools.
_SAID = frozenset({"system_message", "user_message", "assistant_message", "tool_call"})


class FewShotExample(BaseModel):
    """A worked example shown to the judge: field values and the verdict they deserve."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, str] = Field(description="Field values of the example, by field name")
    rating: Literal["yes", "no"]
    rationale: str


class CustomJudgeDefinition(BaseModel):
    """One entry of a custom judges file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$", description="Judge name")
    assessment_type: Literal["ANSWER", "RETRIEVAL"] = Field(description="ANSWER or RETRIEVAL")
    instructions: str = Field(min_length=1, description="jinja2 template over the row's fields")
    examples: list[FewShotExample] = Field(default_factory=list, description="Few-shot examples")
    # Where it was read from, for error messages only: not dumped, so not part of plan.json.
    _source: str | None = PrivateAttr(default=None)

    @property
    def where(self) -> str:
        """The judge and its file, as error messages name them."""
        return f"custom judge {self.name!r}" + (f" in {self._source!r}" if self._source else "")

    @field_validator("assessment_type", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


def _field_text(row: EvalRow, name: str, chunk: Chunk | None) -> str | None:
    if name == "request":
        return row.request_text
    if name in RUN_FIELDS and name not in row.extra:
        view = _run_view(row, name)
        return None if view is None else render_for_judge(view)
    if name == "retrieved_context" and chunk is not None:
        return chunk.content
    value = (getattr(row, name, None) if name in ROW_FIELDS and name not in RUN_FIELDS
             else row.extra.get(name))
    if value is None:
        return None
    if isinstance(value, list):
        return "\n".join(c.content or c.doc_uri if isinstance(c, Chunk) else str(c) for c in value)
    return str(value)


def _run_view(row: EvalRow, name: str) -> Trajectory | None:
    """The steps a run field shows: every step, or (`conversation`) what was said (None: none)."""
    if row.trajectory is None:
        return None
    steps = row.trajectory.steps if name == "trajectory" else tuple(
        Step(kind="assistant_message", text=step.text) if step.kind == "tool_call" else step
        for step in row.trajectory.steps if step.kind in _SAID and step.text)
    return Trajectory(steps=steps) if steps else None


@dataclass(frozen=True)
class CustomJudge(JudgeSpec):
    """A user-defined yes/no judge; RETRIEVAL judges run once per chunk and report precision."""

    instructions: str = ""
    examples: tuple[FewShotExample, ...] = ()
    fields: tuple[str, ...] = ()

    def applies_to(self, row: EvalRow) -> bool:
        """Whether the row has every field the instructions name (per chunk: a chunk's content)."""
        if self.per_chunk and not row.chunks_with_content:
            return False
        return all(
            self.per_chunk and name == "retrieved_context" or _field_text(row, name, None)
            for name in self.fields
        )

    def applies_given(self, texts: Set[str], has_chunks: bool) -> bool:
        """`applies_to` for a row whose fields with text are `texts` (see `text_fields`)."""
        if self.per_chunk and not has_chunks:
            return False
        return all(self.per_chunk and name == "retrieved_context" or name in texts
                   for name in self.fields)

    def missing_inputs(self) -> str:
        """The fields its instructions name, in words."""
        return " and ".join(_RUN_FIELD_WORDS.get(f, f) for f in self.fields) or "nothing"

    @property
    def needs_response(self) -> bool:
        """Whether its instructions name the response."""
        return "response" in self.fields

    def template_context(self, row: EvalRow, chunk: Chunk | None) -> dict:
        """The rendered instructions and examples, every field wrapped as untrusted text."""
        values = {n: untrusted(_field_text(row, n, chunk), n) for n in self.fields}
        instructions = compiled(self.instructions).render(**values)
        examples = [
            {"inputs": "\n".join(untrusted(v, k) for k, v in e.inputs.items()),
             "rating": e.rating, "rationale": e.rationale}
            for e in self.examples
        ]
        return {"name": self.name, "instructions": instructions, "examples": examples,
                "retrieval": self.per_chunk}

    @property
    def prompt_hash(self) -> str:
        """Hash of the template, instructions and examples: editing any is a new prompt."""
        payload = json.dumps([self.instructions, [e.model_dump() for e in self.examples]])
        return hashlib.sha256((template_hash(self.template) + payload).encode()).hexdigest()[:16]


def build_custom_judge(definition: CustomJudgeDefinition, available: set[str]) -> CustomJudge:
    """A runnable judge, once its template is data only and names only fields of the set.

    Every way to a custom judge comes here: the command line's preflight, the flow (which
    deployments start without it) and shard workers rebuilding the plan from plan.json.

    Raises:
        CustomJudgeError: the template is not data only (`referenced_fields`), or names a field
            that no row of the set has.
    """
    fields = referenced_fields(definition.instructions, definition.where)
    missing = sorted(fields - available)
    if missing:
        raise CustomJudgeError(
            f"{definition.where} uses field(s) {', '.join(map(repr, missing))} "
            f"that the evaluation set lacks; it has: {', '.join(sorted(available))}"
        )
    retrieval = definition.assessment_type == "RETRIEVAL"
    return CustomJudge(
        name=definition.name, kind="retrieval" if retrieval else "answer", requires=(),
        template="custom.j2", per_chunk=retrieval, instructions=definition.instructions,
        examples=tuple(definition.examples), fields=tuple(sorted(fields)),
    )


def load_custom_judges(url: str) -> list[CustomJudgeDefinition]:
    """Definitions from a YAML or JSON file: a list, or a mapping with a `judges` list.

    Raises:
        CustomJudgeError: the file cannot be read, an entry is invalid, or a template is not
            data only (checked here too, so that the message names the file).
    """
    try:
        with open_url(url, "r") as handle:
            data = yaml.safe_load(handle) if not url.endswith(".json") else json.load(handle)
    except (OSError, yaml.YAMLError, json.JSONDecodeError) as error:
        raise CustomJudgeError(f"cannot read custom judges from {url!r}: {error}") from None
    entries = data.get("judges", []) if isinstance(data, dict) else data
    try:
        definitions = [CustomJudgeDefinition.model_validate(entry) for entry in entries or []]
    except ValidationError as error:
        raise CustomJudgeError(f"invalid custom judge in {url!r}: {error}") from None
    for definition in definitions:
        definition._source = url
        referenced_fields(definition.instructions, definition.where)
    return definitions


def text_fields(row: EvalRow) -> set[str]:
    """The fields a custom judge reads as some text on this row (what `applies_to` asks)."""
    names = dict.fromkeys([*ROW_FIELDS, *row.extra])
    # A run field has text when it has steps: no need to render the row's run here.
    return {n for n in names if (_run_view(row, n) is not None
                                 if n in RUN_FIELDS and n not in row.extra
                                 else _field_text(row, n, None))}


def present_fields(row: EvalRow, texts: Set[str]) -> set[str]:
    """`fields_present` of one row, given its `text_fields`."""
    return ({n for n in ROW_FIELDS if (_run_view(row, n) is not None if n in RUN_FIELDS
                                       else n in texts)}
            | {k for k, v in row.extra.items() if v is not None})


def fields_present(rows: Sequence[EvalRow]) -> set[str]:
    """The fields at least one row has a value for (what a custom template may name)."""
    present = set()
    for row in rows:
        # A run field is present when it has steps: no need to render every row's run here.
        present |= {n for n in ROW_FIELDS if (_run_view(row, n) if n in RUN_FIELDS
                                              else _field_text(row, n, None))}
        present |= {k for k, v in row.extra.items() if v is not None}
    return present

