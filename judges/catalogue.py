"""Every judge a run knows: the built-ins, the run's custom judges and its aspect critics.

The one list behind planning (which judges apply to the set), calibration (which names
`human_labels` may use) and shard workers (rebuilding the parent's plan), so the three cannot
disagree on a name, a prefix or a prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass
from functools import cached_property

from judges.base import JudgeSpec
from judges.builtin import BUILTIN_JUDGES
from judges.builtin.aspect_critic import make_aspect
from judges.builtin.custom import (
    CustomJudgeDefinition,
    build_custom_judge,
    load_custom_judges,
    referenced_fields,
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

    def known(self, fields: Set[str] | None = None) -> list[JudgeSpec]:
        """Every judge: the built-ins, then the run's own (see `extra`).

        An aspect may share a built-in's name (`correctness`): both are listed, told apart by
        their prefix.
        """
        return [*BUILTIN_JUDGES.values(), *self.extra(fields)]
