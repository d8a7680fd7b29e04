"""What every kind of run shares: where it is published, its reply cache, its final state.

evaluate, compare and regression compose these with their own phases, so a run id, a cache
location or an "incomplete" state means the same thing whichever flow made it.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from prefect.states import Completed

from flows.run.completeness import INCOMPLETE
from flows.run.outcome import kept
from judges.blocks.plain_text import visible
from judges.model.batch.broker import BatchOptions
from judges.model.batch.current import close_batches, current_batches, open_batches
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.outputs import RunLocation

# The Prefect state of a run that published but judged too little to be read.
INCOMPLETE_STATE_NAME = "Incomplete"
CACHE_FOLDER = ".judgeflow-cache"


class RunParams(Protocol):
    """The fields every flow's parameters have."""

    output: str
    suite: str
    run_id: str | None
    cache: str | None
    use_cache: bool
    storage_options: dict


class BatchParams(Protocol):
    """The fields of a run's parameters that say whether and how its calls go in batches."""

    batch: bool
    batch_retry: str
    batch_max_requests: int
    batch_poll_max_seconds: float


def new_run_id(now: datetime) -> str:
    """A sortable, collision-resistant run id: UTC timestamp and a short random suffix."""
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


def run_location(params: RunParams, started_at: datetime) -> RunLocation:
    """Where this run publishes: `{output}/{suite}/{run_id}`.

    Without a run id, a flow run's is named after the flow run itself (`flow_run_run_id`), so
    that Prefect retrying or re-scheduling the same flow run (the crash automation,
    docs/deployments.md, "A night that survives its worker") resumes what it had done (its
    stored chunks and submitted batches) instead of starting over under a new id.
    """
    run_id = params.run_id or _current_flow_run_id() or new_run_id(started_at)
    return RunLocation(params.output, params.suite, run_id, params.storage_options)


def flow_run_run_id(flow_run: Any) -> str | None:
    """The run id of a flow run given none: its expected start time (UTC) and 4 hex of its id.

    The same for every attempt of one flow run, whoever re-runs it: the server sets the
    expected start time once (a scheduled run's is its slot, 03:00 on the night it judges)
    and keeps it when the run is retried or re-scheduled. Not the creation time: the scheduler
    creates a deployment's next nights together, seconds apart, so their ids would not sort
    by night. The shape is `new_run_id`'s, so ids of every origin sort by time together.
    """
    started = getattr(flow_run, "expected_start_time", None) or getattr(flow_run, "created", None)
    if started is None:
        return None
    return f"{started.astimezone(UTC):%Y%m%dT%H%M%SZ}-{flow_run.id.hex[:4]}"


def _current_flow_run_id() -> str | None:
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    flow_run = getattr(context, "flow_run", None)
    return None if flow_run is None else flow_run_run_id(flow_run)


def cache_url(params: RunParams) -> str | None:
    """The judge reply cache: the given URL, `{output}/.judgeflow-cache`, or none."""
    if not params.use_cache:
        return None
    return params.cache or f"{params.output.rstrip('/')}/{CACHE_FOLDER}"


def run_summary(location: RunLocation, manifest: dict, metrics: Mapping[str, Any], urls: dict
                ) -> dict:
    """What a flow returns to its caller (the command line, the Python API)."""
    return {
        "run_id": location.run_id,
        "run_url": location.url(),
        "files": urls,
        "metrics": dict(metrics),  # plain data: the flow run's result is persisted
        "offline": manifest["judge"]["offline"],
        "usage": manifest["usage"],
        "ledger": manifest.get("ledger"),
        "status": manifest.get("status", "complete"),
        "incomplete_reasons": manifest.get("incomplete_reasons", []),
        # advisory panel members above max_error_share: named, but the run is not incomplete
        "advisory_failures": manifest.get("advisory_failures", []),
        # panel members calibration found disagreeing with people, each with its option
        "member_suggestions": [line for entry in (manifest.get("calibration") or {}).get(
            "judges", []) for line in entry.get("member_suggestions", [])],
    }


def final_state(summary: dict):
    """The summary itself, or, for an incomplete run, a Completed state named "Incomplete".

    Not Failed: the run did publish, callers (the command line, the Python API) still need the
    summary, and a flow-level retry would only judge everything again. The state name shows in
    the UI and Prefect emits `prefect.flow-run.Incomplete`, which an automation can alert on.
    """
    if summary["status"] != INCOMPLETE:
        return kept(summary)
    # A reason names the judge model and quotes an error: no line of it may pass for ours.
    message = "incomplete: " + "; ".join(visible(r) for r in summary["incomplete_reasons"])
    return kept(Completed(name=INCOMPLETE_STATE_NAME, message=message, data=summary))


@contextlib.contextmanager
def batch_mode(params: BatchParams, store: ChunkStore) -> Iterator[None]:
    """The run's model calls through batches while inside, when `params.batch` asks for it.

    The batches are recorded in the run's chunk `store`, where a rerun of the run finds them. A
    run nested in another (a regression's rejudge of its baseline) uses the outer run's.
    """
    if not params.batch or current_batches() is not None:
        yield
        return
    from prefect import get_run_logger

    options = BatchOptions(retry=params.batch_retry, max_requests=params.batch_max_requests,
                           max_poll_seconds=params.batch_poll_max_seconds,
                           first_poll_seconds=min(0.5, params.batch_poll_max_seconds),
                           gather_seconds=1.0)
    open_batches(options, store, get_run_logger().info)
    try:
        yield
    finally:
        close_batches()
