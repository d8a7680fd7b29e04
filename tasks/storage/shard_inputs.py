"""What a sharded run's parent hands its child flow runs, and what each child hands back.

All of it lives under the run's folder, on any fsspec URL, so that a worker on another machine
(a Docker or Kubernetes work pool) reads it from S3 as easily as a local process worker reads
it from disk; the children's flow parameters then stay small (URLs and a chunk range, never
rows: Prefect stores parameters and the UI caps them).

    {run}/.shards/plan.json        the judges the parent planned (PlanSpec),
                                   or for a compare run how pairs are judged (PairSpec): the
                                   spec of the kind of chunk (flows/run/chunk_kinds.py)
    {run}/.shards/{k}/rows.jsonl   shard k's rows (or pairs), validated (and generated) by the
                                   parent
    {run}/.shards/{k}/outcome.json what shard k did (ShardOutcome), written at its end
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from judges.builtin.pairwise import Pair
from judges.rows import EvalRow
from judges.storage import is_object_store, open_url, url_to_fs

SHARDS_FOLDER = ".shards"
M = TypeVar("M", bound=BaseModel)


class PlannedJudge(BaseModel):
    """One judge of the parent's plan, with what must match in the child's rebuilt plan."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: int
    prompt_hash: str


class PlanSpec(BaseModel):
    """The parent's judge plan, from which a child rebuilds exactly the same plan.

    A child plans nothing itself: a shard's rows may lack a column that other shards have,
    and the plan is decided over the whole set. Custom judges travel as their definitions, so
    the worker needs no access to the file they were read from.
    """

    model_config = ConfigDict(extra="forbid")

    judges: list[PlannedJudge]
    metrics: list[str]
    skipped: list[dict[str, str]] = Field(default_factory=list)
    custom_judges: list[dict] = Field(default_factory=list)
    aspects: list[str] = Field(default_factory=list)
    strictness: int = 1
    fields: list[str] = Field(default_factory=list, description="Fields some row of the set has")


class PairSpec(BaseModel):
    """How the parent of a sharded compare run judges every pair: its children judge so too."""

    model_config = ConfigDict(extra="forbid")

    rubric: dict | None = Field(None, description="The fixed rubric, as loaded by the parent")
    swap: bool = True
    strict_ties: bool = False


class ShardOutcome(BaseModel):
    """What one shard did, written by the child at its end and read by the parent."""

    model_config = ConfigDict(extra="forbid")

    shard: int
    flow_run_id: str | None
    worker: str | None = Field(description="The Prefect worker that ran it (PREFECT__WORKER_NAME)")
    host: str
    chunks_judged: list[int] = Field(description="Global indexes of chunks judged by this run")
    chunks_reused: list[int] = Field(description="Global indexes found already finished")
    chunks_unfinished: list[int] = Field(description="Global indexes whose task failed for good")
    first_errors: dict[str, str] = Field(default_factory=dict)
    seconds: float
    cpu_seconds: float = Field(description="CPU time of the shard's process, start-up included")
    prices: dict[str, dict[str, float | None] | None] = Field(
        default_factory=dict, description="The judge model's prices in litellm's map, as the "
        "shard read them (None: unpriced), so that the parent need not import litellm")
    warm_start: bool = Field(False, description="Forked from a `judgeflow worker`'s warm "
                             "process (its imports made once), not started cold")


def shard_url(run_url: str, shard: int | None = None, name: str = "") -> str:
    """`{run}/.shards[/{shard}][/{name}]`."""
    parts = [run_url.rstrip("/"), SHARDS_FOLDER]
    if shard is not None:
        parts.append(str(shard))
    if name:
        parts.append(name)
    return "/".join(parts)


def write_rows(url: str, rows: Sequence[EvalRow] | Sequence[Pair], storage_options: dict
               ) -> None:
    """Rows (or pairs) as JSONL, exactly as a child reads them back (`read_shard_items`)."""
    text = "".join(row.model_dump_json(fallback=str) + "\n" for row in rows)
    _write_text(url, text, storage_options)


def read_shard_items(url: str, storage_options: dict, kind: type[M] = EvalRow) -> list[M]:
    """The rows (`kind`: EvalRow or Pair) `write_rows` wrote, in order."""
    with open_url(url, "r", storage_options, encoding="utf-8") as handle:
        return [kind.model_validate_json(line) for line in handle if line.strip()]


def write_model(url: str, value: BaseModel, storage_options: dict) -> None:
    """A pydantic value as a JSON document."""
    _write_text(url, value.model_dump_json(indent=1), storage_options)


def read_model(url: str, model: type[M], storage_options: dict) -> M | None:
    """The document at `url` as `model`; None when there is none (a shard that never ended)."""
    try:
        with open_url(url, "r", storage_options, encoding="utf-8") as handle:
            return model.model_validate(json.load(handle))
    except FileNotFoundError:
        return None


def remove_shard_files(run_url: str, shards: int, storage_options: dict) -> None:
    """Delete what `{run}/.shards` holds for up to `shards` shards (its inputs are copies).

    On an object store each file goes by name, as the chunk store does: no listing, so a
    writer needs no bucket-level right. A failure is left to the caller: nothing is lost.
    """
    fs, root = url_to_fs(shard_url(run_url), storage_options)
    if not is_object_store(fs):
        with contextlib.suppress(FileNotFoundError):
            fs.rm(root, recursive=True)
        return
    names = ["plan.json"] + [f"{k}/{name}" for k in range(shards)
                             for name in ("rows.jsonl", "outcome.json")]
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(f"{root}/{name}")


def _write_text(url: str, text: str, storage_options: dict) -> None:
    fs, path = url_to_fs(url, storage_options)
    if not is_object_store(fs):  # object stores have no folders (and making one may list)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
