"""The kinds of chunk a run judges, stores and resumes: judged rows, generated rows, judged pairs.

Each is the protocol of tasks/storage/chunk_kinds.py (`ChunkKind`) for one kind of item: how a
chunk is judged (or generated), fingerprinted, stored, read back, counted, and what a chunk
whose task failed, or that no shard finished, becomes. They live beside the driver that runs
them (execution.py); the store only keeps what they encode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from flows.run.kind_specs import plan_spec, rebuild_plan
from judges.builtin.custom import fields_present
from judges.builtin.pairwise import Pair, PairResult, PairwiseOptions, failed_verdict, judge_pairs
from judges.calls import JudgeContext
from judges.catalogue import JudgeCatalogue
from judges.engine import failed_rows, judge_rows
from judges.model.settings import LLMSettings
from judges.model.usage import Usage
from judges.pairwise.models import Rubric
from judges.pairwise.reconcile import PairVerdict
from judges.plan import JudgePlan
from judges.results import RowResult
from judges.rows import GENERATION_ERROR, EvalRow
from tasks.call_log import CallLog, CallLogError
from tasks.generate import GeneratedChunk, mark_generation_failed
from tasks.storage.pair_codec import decode_pair_verdict, encode_pair_verdict, pairs_fingerprint
from tasks.storage.row_codec import (
    ResultCodecError,
    decode_row_result,
    decode_usage,
    encode_row_result,
    encode_usage,
    generation_fingerprint,
    judge_fingerprint,
    row_json,
)
from tasks.storage.shard_inputs import PairSpec, PlanSpec


def _stored_calls(value: Any) -> CallLog:
    try:
        return CallLog.stored(value)
    except CallLogError as error:  # a store's miss, like any result that does not decode
        raise ResultCodecError(str(error)) from None


R = TypeVar("R", RowResult, PairResult)


@dataclass
class ChunkResult(Generic[R]):
    """A judged chunk: one typed result per item (row or pair) in input order, usage, calls.

    Results stay typed up to the publish edge: the phase that stages them makes the records.
    """

    index: int
    results: list[R]
    usage: Usage
    calls: CallLog = field(default_factory=CallLog)


@dataclass(frozen=True)
class JudgedRowChunks:
    """Rows through every planned judge."""

    plan: JudgePlan
    settings: LLMSettings
    name: str = "judge"
    item: ClassVar[type[EvalRow]] = EvalRow
    noun: ClassVar[str] = "rows"
    spec_model: ClassVar[type[PlanSpec]] = PlanSpec

    def spec(self, catalogue: JudgeCatalogue, items: Sequence[EvalRow]) -> PlanSpec:
        """The plan, the catalogue it came from and the fields the rows have (`rebuilt`)."""
        return plan_spec(self.plan, catalogue, fields_present(items))

    @classmethod
    def rebuilt(cls, spec: PlanSpec, settings: LLMSettings) -> JudgedRowChunks:
        """The parent's kind, in a shard (raises ShardPlanError when its judges differ)."""
        return cls(rebuild_plan(spec), settings)

    async def judge(self, ctx: JudgeContext, index: int, items: list[EvalRow]
                    ) -> ChunkResult[RowResult]:
        """Every planned judge over the rows, all their calls concurrent."""
        return ChunkResult(index, await judge_rows(ctx, self.plan, items), ctx.usage,
                           CallLog.of(ctx.calls))

    def fingerprint(self, items: list[EvalRow]) -> str:
        """Rows, plan (judges, prompts) and model."""
        return judge_fingerprint(items, self.plan, self.settings)

    def encode(self, result: ChunkResult) -> dict:
        """Typed row results, usage and the call log."""
        return {"results": [encode_row_result(r) for r in result.results],
                "usage": encode_usage(result.usage), "calls": result.calls.text}

    def decode(self, index: int, stored: dict, items: list[EvalRow]) -> ChunkResult:
        """Row results resolved through this run's plan, each holding the run's own row."""
        results = stored["results"]
        if len(results) != len(items):
            raise ResultCodecError(f"stored chunk holds {len(results)} results for "
                                   f"{len(items)} rows")
        return ChunkResult(index, [decode_row_result(r, self.plan, row)
                                   for r, row in zip(results, items, strict=True)],
                           decode_usage(stored["usage"]), _stored_calls(stored["calls"]))

    def size(self, result: ChunkResult) -> int:
        """Rows judged."""
        return len(result.results)


    def errors(self, result: ChunkResult) -> int:
        """Judgments that ended as an error."""
        return sum(judged.errored for r in result.results for judged in r.judges)

    def failed(self, index: int, items: list[EvalRow], failure: str) -> ChunkResult:
        """Every applicable judge of every row carries the failure."""
        return ChunkResult(index, failed_rows(items, self.plan, failure), Usage())

    def missing(self, index: int, items: list[EvalRow], why: str) -> ChunkResult:
        """As a failed chunk, saying why no shard finished it."""
        return self.failed(index, items, why)

    def first_errors(self, result: ChunkResult) -> dict[str, str]:
        """Each judge's first error in the chunk, by prefix (what a shard reports)."""
        errors: dict[str, str] = {}
        for row in result.results:
            for judged in row.judges:
                if judged.errored:
                    errors.setdefault(judged.spec.prefix, judged.verdict.error)
        return errors


@dataclass(frozen=True)
class GeneratedRowChunks:
    """Rows answered by the candidate model."""

    settings: LLMSettings
    name: str = "generate"

    def fingerprint(self, items: list[EvalRow]) -> str:
        """Rows and the candidate model."""
        return generation_fingerprint(items, self.settings)

    def encode(self, result: GeneratedChunk) -> dict:
        """The rows as given to the judges, the usage and the call log."""
        return {"rows": [row_json(r) for r in result.rows], "usage": encode_usage(result.usage),
                "calls": result.calls.text}

    def decode(self, index: int, stored: dict, items: list[EvalRow]) -> GeneratedChunk:
        """The stored rows (the items with their generated responses), validated again."""
        return GeneratedChunk([EvalRow.model_validate(r) for r in stored["rows"]],
                              decode_usage(stored["usage"]), _stored_calls(stored["calls"]))

    def size(self, result: GeneratedChunk) -> int:
        """Rows answered (or marked failed)."""
        return len(result.rows)


    def errors(self, result: GeneratedChunk) -> int:
        """Rows whose generation failed."""
        return sum(GENERATION_ERROR in row.extra for row in result.rows)

    def failed(self, index: int, items: list[EvalRow], failure: str) -> GeneratedChunk:
        """Every row keeps the failure as its generation error."""
        error = f"generation task failed: {failure}"
        return GeneratedChunk([mark_generation_failed(row, error) for row in items], Usage())

    def missing(self, index: int, items: list[EvalRow], why: str) -> GeneratedChunk:
        """Generation is never sharded: a missing chunk is a failed one."""
        return self.failed(index, items, why)


@dataclass(frozen=True)
class JudgedPairChunks:
    """Pairs judged in both orders (or forward only) and reconciled."""

    options: PairwiseOptions
    settings: LLMSettings
    name: str = "pairs"
    item: ClassVar[type[Pair]] = Pair
    noun: ClassVar[str] = "pairs"
    spec_model: ClassVar[type[PairSpec]] = PairSpec

    def spec(self, catalogue: JudgeCatalogue, items: Sequence[Pair]) -> PairSpec:
        """How the pairs are judged: rubric, swap, tie rule."""
        rubric = self.options.rubric
        return PairSpec(rubric=rubric.model_dump() if rubric else None, swap=self.options.swap,
                        strict_ties=self.options.strict_ties)

    @classmethod
    def rebuilt(cls, spec: PairSpec, settings: LLMSettings) -> JudgedPairChunks:
        """The parent's kind, in a shard."""
        rubric = Rubric.model_validate(spec.rubric) if spec.rubric is not None else None
        return cls(PairwiseOptions(rubric, spec.swap, spec.strict_ties), settings)

    async def judge(self, ctx: JudgeContext, index: int, items: list[Pair]
                    ) -> ChunkResult[PairResult]:
        """Every pass of every pair, concurrent; the verdicts reconciled."""
        verdicts = await judge_pairs(ctx, items, self.options)
        return ChunkResult(index, self._results(items, verdicts), ctx.usage,
                           CallLog.of(ctx.calls))

    def _results(self, items: list[Pair], verdicts: list[PairVerdict]) -> list[PairResult]:
        return [PairResult(p, v, self.options.swap) for p, v in zip(items, verdicts, strict=True)]

    def fingerprint(self, items: list[Pair]) -> str:
        """Pairs, rubric, rules and model."""
        return pairs_fingerprint(items, self.options, self.settings)

    def encode(self, result: ChunkResult[PairResult]) -> dict:
        """Verdicts, usage and the call log (the records are made from them where published)."""
        return {"verdicts": [encode_pair_verdict(r.verdict) for r in result.results],
                "usage": encode_usage(result.usage), "calls": result.calls.text}

    def decode(self, index: int, stored: dict, items: list[Pair]) -> ChunkResult[PairResult]:
        """Verdicts reconciled again under this run's rules, each with the run's own pair."""
        verdicts = stored["verdicts"]
        if len(verdicts) != len(items):
            raise ResultCodecError(f"stored chunk holds {len(verdicts)} verdicts for "
                                   f"{len(items)} pairs")
        return ChunkResult(
            index, self._results(items, [decode_pair_verdict(v, self.options) for v in verdicts]),
            decode_usage(stored["usage"]), _stored_calls(stored["calls"]))

    def size(self, result: ChunkResult[PairResult]) -> int:
        """Pairs judged."""
        return len(result.results)

    def errors(self, result: ChunkResult[PairResult]) -> int:
        """Pairs without a verdict."""
        return sum(r.verdict.verdict == "error" for r in result.results)

    def failed(self, index: int, items: list[Pair], failure: str) -> ChunkResult[PairResult]:
        """Every pair is an error verdict carrying the failure."""
        return self.missing(index, items, f"chunk task failed: {failure}")

    def first_errors(self, result: ChunkResult[PairResult]) -> dict[str, str]:
        """The chunk's first pair without a verdict, as the pairwise judge's error."""
        first = next((r.verdict.error_message for r in result.results
                      if r.verdict.error_message), None)
        return {"pairwise": first} if first else {}

    def missing(self, index: int, items: list[Pair], why: str) -> ChunkResult[PairResult]:
        """Every pair is an error verdict saying why."""
        verdicts = [failed_verdict(why, self.options.swap) for _ in items]
        return ChunkResult(index, self._results(items, verdicts), Usage())


JudgedKind = JudgedRowChunks | JudgedPairChunks
# Every kind a shard can judge, by name: what a sharded run's parent names in its shards'
# parameters (flows/shards/flow.py `ShardParams.kind`) and a shard rebuilds from its spec.
JUDGED_KINDS: dict[str, type[JudgedRowChunks] | type[JudgedPairChunks]] = {
    kind.name: kind for kind in (JudgedRowChunks, JudgedPairChunks)}
