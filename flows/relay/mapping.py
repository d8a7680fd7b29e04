"""From an MLflow registry event to the candidate model that `model.deployed` announces.

The payload is untrusted (whoever can register a model or set an alias writes it), and its
values end up in a litellm model string and an endpoint URL. So the operator's templates may
name only `{name}`, `{version}` and `{alias}`, bare (no attribute, index, conversion or format
spec), the endpoint's only in its path; and each value must fit a narrow charset before it is
substituted: no `/` to change the provider prefix, no `@`, `:` or `#` to change a URL's host.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

VERSION_CREATED = "model_version.created"
ALIAS_CREATED = "model_version_alias.created"
# The fields each relayed event carries, hence the placeholders a template may use with it.
EVENT_FIELDS = {VERSION_CREATED: frozenset({"name", "version"}),
                ALIAS_CREATED: frozenset({"name", "version", "alias"})}
_VALUES = {
    # MLflow accepts almost any registered model name; a relayed one must be a plain slug.
    "name": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"),
    "version": re.compile(r"^[0-9]{1,9}$"),
    "alias": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"),
}


class Refused(Exception):
    """The event cannot be relayed (a value outside its charset, a malformed payload)."""


class _Data(BaseModel):
    """The registry fields the relay reads; MLflow's others (tags, source, run_id) are not."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    version: str
    alias: str | None = None


class _Envelope(BaseModel):
    """MLflow's delivery body. `extra="ignore"`: MLflow adds keys (e.g. `workspace`) over time."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    entity: str
    action: str
    data: dict


class Candidate(NamedTuple):
    """What one relayed event announces."""

    event: str  # the MLflow event, e.g. model_version_alias.created
    name: str  # the registered model's name
    version: str
    alias: str | None
    model: str  # the litellm model string, from the operator's template
    endpoint: str | None


def template_fields(template: str) -> set[str]:
    """The placeholders of `template`; ValueError for any but bare {name} {version} {alias}."""
    fields = set()
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if field not in _VALUES or spec or conversion:
            raise ValueError(f"template {template!r}: only {{name}}, {{version}} and {{alias}} "
                             f"may appear, bare, not {field!r}")
        fields.add(field)
    return fields


@dataclass(frozen=True)
class Mapping:
    """The operator's choice: which events to relay and the candidate they announce."""

    model: str  # e.g. hosted_vllm/{name}
    endpoint: str | None = None  # e.g. http://10.0.0.5:8000/v1, or .../models/{name}/v1
    events: frozenset[str] = frozenset(EVENT_FIELDS)
    aliases: frozenset[str] = frozenset()  # empty: any alias

    def __post_init__(self) -> None:
        unknown = self.events - set(EVENT_FIELDS)
        if not self.events or unknown:
            raise ValueError(f"events must be among {sorted(EVENT_FIELDS)}, not "
                             f"{sorted(unknown) or 'none'}")
        used = template_fields(self.model) | template_fields(self.endpoint or "")
        for event in self.events:
            if missing := used - EVENT_FIELDS[event]:
                raise ValueError(f"{event} carries no {sorted(missing)}: relay only "
                                 f"{ALIAS_CREATED} to use it in a template")
        if self.endpoint is not None:
            parts = urlsplit(self.endpoint.split("{", 1)[0])
            templated = "{" in self.endpoint
            if parts.scheme not in ("http", "https") or not parts.netloc or (
                    templated and not parts.path):
                raise ValueError(f"endpoint {self.endpoint!r}: an http(s) URL whose "
                                 "placeholders, if any, are in its path")

    def candidate(self, body: bytes) -> Candidate | None:
        """The candidate a delivery announces; None for an event the relay does not act on."""
        try:
            envelope = _Envelope.model_validate_json(body)
        except ValidationError as error:
            raise Refused(f"not an MLflow webhook delivery: {error.errors()[0]['msg']}") from None
        event = f"{envelope.entity}.{envelope.action}"
        if event not in self.events:
            return None
        try:
            data = _Data.model_validate(envelope.data)
        except ValidationError as error:
            raise Refused(f"{event}: {error.errors()[0]['msg']}") from None
        values = {"name": data.name, "version": data.version, "alias": data.alias}
        for field in EVENT_FIELDS[event]:
            if not _VALUES[field].match(values[field] or ""):
                raise Refused(f"{event}: {field} {values[field]!r} is outside the relay's "
                              f"charset ({_VALUES[field].pattern})")
        if event == ALIAS_CREATED and self.aliases and data.alias not in self.aliases:
            return None
        alias = data.alias if event == ALIAS_CREATED else None  # checked only where it counts
        return Candidate(event, data.name, data.version, alias,
                         self.model.format_map(values),
                         self.endpoint.format_map(values) if self.endpoint else None)
