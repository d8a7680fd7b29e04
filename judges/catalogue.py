"""Every judge a run knows, and the registry of every metric its judges publish.

The one list behind planning (which judges apply to the set), calibration (which names
`human_labels` may use) and shard workers (rebuilding the parent's plan), so the three cannot
disagree on a name, a prefix or a prompt.

The registry (`Registry`) says, for each run-level metric, its judge (or none), its kind, its
rated and error counts, its direction and whether an LLM decided it. It is built from the
judges and metrics of a run and the declarations judges/result_names/ writes beside the
names, so a new kind of judge declares its metrics in one place. The drift canary, the
judge-change rule, the calibration floor, the error-share rule and gate directions read it;
none derives a judge or a denominator from the shape of a name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, get_args

from judges.base import JudgeSpec, MetricSpec
from judges.builtin import BUILTIN_JUDGES
from judges.builtin.aspect_critic import make_aspect
from judges.builtin.custom import (
    CustomJudgeDefinition,
    build_custom_judge,
    load_custom_judges,
)
from judges.builtin.deterministic import DETERMINISTIC_METRICS
from judges.builtin.pairwise import PAIRWISE_JUDGE
from judges.builtin.template_sandbox import referenced_fields
from judges.result_names.calibration import calibration_keys
from judges.result_names.registry import PAIRWISE_JUDGE as PAIR_JUDGE_PREFIX
from judges.result_names.registry import (
    Declared,
    Direction,
    MetricKind,
    area_declaration,
    judge_declarations,
    metric_declarations,
    pairwise_declaration,
    panel_declaration,
    untagged,
)


@dataclass(frozen=True)
class JudgeCatalogue:
    """The run's own judges (custom definitions, aspects, strictness) beside the built-ins."""

    custom: tuple[CustomJudgeDefinition, ...] = ()
    aspects: tuple[str, ...] = ()
    strictness: int = 1

    @classmethod
    def load(cls, custom_judges: str | None, aspects: Iterable[str], strictness: int
             ) -> JudgeCatalogue:
        """The catalogue of a run, reading its custom judges file (if any).

        Raises:
            CustomJudgeError, StorageRefused or OSError: the file cannot be read or is invalid.
        """
        custom = tuple(load_custom_judges(custom_judges)) if custom_judges else ()
        return cls(custom, tuple(aspects), strictness)

    @cached_property
    def aspect_judges(self) -> list[JudgeSpec]:
        """The aspect critics, built once (an even strictness warns once)."""
        return [make_aspect(spec, self.strictness) for spec in self.aspects]

    def extra(self, fields: Set[str] | None = None) -> list[JudgeSpec]:
        """The run's custom judges, then its aspects.

        Args:
            fields: the fields the set has: a custom judge naming another one is refused. None
                (before any row is read) builds each against the fields it names.

        Raises:
            CustomJudgeError: a template is not data only, or names a field the set lacks.
        """
        custom = [build_custom_judge(d, referenced_fields(d.instructions) if fields is None
                                     else set(fields)) for d in self.custom]
        return [*custom, *self.aspect_judges]

    @property
    def pair_judge(self) -> JudgeSpec:
        """The judge of a run's pairs (a compare run, a regression's head-to-head).

        Not among `known`, the judges of rows: a pair judge applies to no row.
        """
        return PAIRWISE_JUDGE

    def known(self, fields: Set[str] | None = None) -> list[JudgeSpec]:
        """Every judge: the built-ins, then the run's own (see `extra`).

        An aspect may share a built-in's name (`correctness`): both are listed, told apart by
        their prefix.
        """
        return [*BUILTIN_JUDGES.values(), *self.extra(fields)]


@dataclass(frozen=True)
class Registry:
    """Every run-level metric of a run, by name, and the judges behind them."""

    entries: Mapping[str, Declared]
    judges: Mapping[str, JudgeSpec]  # by prefix
    judge_of_key: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, judges: Iterable[JudgeSpec], metrics: Iterable[MetricSpec] = ()) -> Registry:
        """The registry of a run with these judges and metrics."""
        judges = list(judges)
        entries: dict[str, Declared] = {}
        for spec in judges:
            entries |= {d.name: d for d in judge_declarations(spec)}
        for metric in metrics:
            entries |= {d.name: d for d in metric_declarations(metric)}
        by_prefix = {spec.prefix: spec for spec in judges}
        keys = {key: (prefix, by_prefix[prefix].name)
                for prefix, key in calibration_keys(judges).items()}
        return cls(entries, by_prefix, keys)

    def published(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The declarations of the metrics `names` (tags dropped), as the manifest records them.

        What a reader of the published run (the report, summary.md, the suite's history)
        needs without the run's judges: see `from_published`.
        """
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            _, bare = untagged(name)
            if bare not in out and (found := self.entry(bare)) is not None:
                out[bare] = {k: v for k, v in found._asdict().items() if k != "name"}
        return out

    @classmethod
    def from_published(cls, section: Any) -> Registry:
        """The registry a published manifest recorded (`published`); the built-ins' without one.

        The section is read as untrusted: an entry whose fields are not what `Declared` holds
        is left out (its metric then has no declared answer), never guessed.
        """
        entries: dict[str, Declared] = {}
        for name, fields in (section.items() if isinstance(section, Mapping) else ()):
            try:
                entries[name] = _declared(name, fields)
            except (TypeError, ValueError):
                continue
        builtin = cls.of(BUILTIN_JUDGES.values(), DETERMINISTIC_METRICS.values())
        return cls({**builtin.entries, **entries}, builtin.judges, builtin.judge_of_key)

    def entry(self, name: str) -> Declared | None:
        """What `name` (or `tag/{tag}/{name}`) is; None: no judge or metric of the run writes it."""
        _, name = untagged(name)
        return (self.entries.get(name) or pairwise_declaration(name)
                or area_declaration(name, self.judge_of_key)
                or panel_declaration(name, self.judges))

    def judge_of(self, name: str) -> JudgeSpec | None:
        """The judge that decided `name`, if one did: a judge of the run, or the pairwise judge."""
        found = self.entry(name)
        if found is None or not found.judge:
            return None
        if found.judge == PAIR_JUDGE_PREFIX:
            return PAIRWISE_JUDGE
        return self.judges.get(found.judge)

    def pairwise_gated(self, names: Iterable[str]) -> bool:
        """Whether any of the metrics `names` is a figure the head-to-head's model decided.

        The pairwise judge is no judge of the run's plan, so `llm_judges` does not list it (and
        a night is not incomplete for it unchecked): the canary asks here.
        """
        return any((found := self.entry(name)) is not None and found.llm
                   and self.judge_of(name) is PAIRWISE_JUDGE for name in names)

    def llm_judges(self, names: Iterable[str]) -> list[JudgeSpec]:
        """The LLM judges the metrics `names` depend on, once each, in order."""
        out: dict[str, JudgeSpec] = {}
        for name in names:
            found = self.entry(name)
            if found is not None and found.llm and found.judge in self.judges:
                out.setdefault(found.judge, self.judges[found.judge])
        return list(out.values())


_TEXT = (str, type(None))


def _declared(name: str, fields: Any) -> Declared:
    """One recorded declaration, checked field by field.

    Raises:
        TypeError, ValueError: not a declaration as `Registry.published` writes it.
    """
    if not isinstance(name, str) or not isinstance(fields, Mapping):
        raise TypeError(f"declaration {name!r:.80} is not a mapping")
    found = Declared(name, **{k: fields[k] for k in Declared._fields[1:] if k in fields})
    if (found.kind not in get_args(MetricKind) or found.direction not in get_args(Direction)
            or not isinstance(found.llm, bool) or not isinstance(found.share, bool)
            or not all(isinstance(getattr(found, k), _TEXT)
                       for k in ("judge", "judge_name", "rated", "errors", "row_field",
                                 "row_error", "row_kind", "unit"))):
        raise ValueError(f"declaration {name!r:.80} has a field of the wrong kind")
    return found
