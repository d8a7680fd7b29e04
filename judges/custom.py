"""Custom judges from a YAML/JSON file: Databricks-style ANSWER or RETRIEVAL assessments.

The instructions are a jinja2 template over the row's fields. Each field is handed to it already
wrapped in its <untrusted-...> block, so a user's template cannot forget to delimit evaluated
text. In a RETRIEVAL judge `retrieved_context` is the one chunk being judged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import jinja2
import yaml
from jinja2 import meta
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from judges.base import JudgeSpec, prompt_environment, template_hash, untrusted
from judges.rows import Chunk, EvalRow
from judges.storage import open_url

ROW_FIELDS = (
    "request", "response", "expected_response", "expected_facts",
    "retrieved_context", "expected_retrieved_context",
)


class CustomJudgeError(ValueError):
    """A custom judge definition that cannot run (bad file, unknown field, bad template)."""


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

    @field_validator("assessment_type", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


def _field_text(row: EvalRow, name: str, chunk: Chunk | None) -> str | None:
    if name == "request":
        return row.request_text
    if name == "retrieved_context" and chunk is not None:
        return chunk.content
    value = getattr(row, name, None) if name in ROW_FIELDS else row.extra.get(name)
    if value is None:
        return None
    if isinstance(value, list):
        return "\n".join(c.content or c.doc_uri if isinstance(c, Chunk) else str(c) for c in value)
    return str(value)


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

    def missing_inputs(self) -> str:
        """The fields its instructions name, in words."""
        return " and ".join(self.fields) or "nothing"

    @property
    def needs_response(self) -> bool:
        """Whether its instructions name the response."""
        return "response" in self.fields

    def template_context(self, row: EvalRow, chunk: Chunk | None) -> dict:
        """The rendered instructions and examples, every field wrapped as untrusted text."""
        values = {n: untrusted(_field_text(row, n, chunk), n) for n in self.fields}
        instructions = prompt_environment().from_string(self.instructions).render(**values)
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


def referenced_fields(instructions: str) -> set[str]:
    """The variables the instructions use; CustomJudgeError if they are not a valid template."""
    try:
        ast = prompt_environment().parse(instructions)
        fields = meta.find_undeclared_variables(ast)
        prompt_environment().from_string(instructions)  # unknown filters fail here, not per row
    except jinja2.TemplateError as error:
        raise CustomJudgeError(f"instructions are not a valid template: {error}") from None
    return fields


def build_custom_judge(definition: CustomJudgeDefinition, available: set[str]) -> CustomJudge:
    """A runnable judge, once every field its template names is known to the set.

    Raises:
        CustomJudgeError: the template names a field that no row of the set has.
    """
    fields = referenced_fields(definition.instructions)
    missing = sorted(fields - available)
    if missing:
        raise CustomJudgeError(
            f"custom judge {definition.name!r} uses field(s) {', '.join(map(repr, missing))} "
            f"that the evaluation set lacks; it has: {', '.join(sorted(available))}"
        )
    retrieval = definition.assessment_type == "RETRIEVAL"
    return CustomJudge(
        name=definition.name, kind="retrieval" if retrieval else "answer", requires=(),
        template="custom.j2", per_chunk=retrieval, instructions=definition.instructions,
        examples=tuple(definition.examples), fields=tuple(sorted(fields)),
    )


def load_custom_judges(url: str) -> list[CustomJudgeDefinition]:
    """Definitions from a YAML or JSON file: a list, or a mapping with a `judges` list."""
    try:
        with open_url(url, "r") as handle:
            data = yaml.safe_load(handle) if not url.endswith(".json") else json.load(handle)
    except (OSError, yaml.YAMLError, json.JSONDecodeError) as error:
        raise CustomJudgeError(f"cannot read custom judges from {url!r}: {error}") from None
    entries = data.get("judges", []) if isinstance(data, dict) else data
    try:
        return [CustomJudgeDefinition.model_validate(entry) for entry in entries or []]
    except ValidationError as error:
        raise CustomJudgeError(f"invalid custom judge in {url!r}: {error}") from None


def fields_present(rows: Sequence[EvalRow]) -> set[str]:
    """The fields at least one row has a value for (what a custom template may name)."""
    present = set()
    for row in rows:
        present |= {n for n in ROW_FIELDS if _field_text(row, n, None)}
        present |= {k for k, v in row.extra.items() if v is not None}
    return present

