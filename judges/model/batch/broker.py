"""Calls gathered into provider batches, submitted once, polled until they are answered.

The broker runs on a thread with its own event loop, so that a chunk on any thread or loop can
hand it a call and wait on a plain future, holding no concurrency slot while the provider works.
Calls for one endpoint and model are gathered until none has come for `gather_seconds` (or a
batch is full: the provider's limits on requests and bytes per file), then uploaded as one
JSONL file and submitted as one batch, which the ledger records before anything waits on it.
Each batch is polled with a growing delay; when it ends (completed, expired, failed or
cancelled) its output and error files are read and every waiting call gets its answer, or the
reason it has none (then the model client retries it within its attempts). A batch named by the
ledger of an earlier attempt is checked at the provider before anything waits on it
(binding.py): one that is not this run's is refused and its requests are submitted anew.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import judges.model.litellm_door as door
from judges.model.batch import provider
from judges.model.batch.binding import batch_metadata, problem_at_provider, stray_answers
from judges.model.batch.ledger import REFUSED, BatchLedger, BatchRecord
from judges.model.batch.provider import Endpoint, describe
from judges.model.batch.requests import BatchAnswer, BatchLine, read_answers

logger = logging.getLogger(__name__)
# Each wait between polls is this much longer than the last (up to the cap): a batch's end is
# noticed at most a quarter of its age late, with a few dozen polls for an hour's batch.
POLL_GROWTH = 1.25


@dataclass(frozen=True)
class BatchOptions:
    """How calls are batched, and what a request the batch did not answer becomes."""

    retry: Literal["batch", "online"] = "batch"
    gather_seconds: float = 2.0
    # Calls keep coming at most this long into one batch: a steady trickle still gets sent.
    max_gather_seconds: float = 30.0
    first_poll_seconds: float = 1.0
    max_poll_seconds: float = 60.0
    max_requests: int = 50_000  # OpenAI's limits per batch file
    max_bytes: int = 190 * 1024 * 1024


@dataclass
class _Gathering:
    lines: list[BatchLine] = field(default_factory=list)
    size: int = 0
    timer: asyncio.TimerHandle | None = None
    started: float | None = None  # the loop's time of the first call gathered


class BatchBroker:
    """This process's batches: gathered, submitted, polled, answered (see the module)."""

    def __init__(self, options: BatchOptions, ledger: BatchLedger,
                 on_progress: Callable[[str], None] | None = None):
        self.options = options
        self._delays = provider.Delays(options.first_poll_seconds, options.max_poll_seconds)
        self.ledger = ledger
        self._say = on_progress or logger.info
        self._loop = asyncio.new_event_loop()
        # The thread runs in the opening flow run's context: what it reads and writes (the
        # ledger) is checked against that run's roots (judges/storage.py) like the rest.
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._loop.run_forever,),
                                        name="judgeflow-batches", daemon=True)
        self._thread.start()
        self._waiters: dict[str, list[concurrent.futures.Future]] = {}
        self._answers: dict[str, BatchAnswer] = {}
        self._gathering: dict[Endpoint, _Gathering] = {}
        self._polling: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self.submitted_batches = 0
        self._vouched: set[str] = set()  # batch ids submitted by this process: not checked
        # Batches of the ledger being checked at the provider, with the calls waiting on them.
        self._checking: dict[str, list[tuple[Endpoint, BatchLine]]] = {}
        self.refused: list[str] = []  # why each batch named by the ledger was refused
        kept = [r for r in ledger.records if r.status != REFUSED]
        if kept:
            self._say(f"resuming {len(kept)} batch(es) submitted by an earlier attempt of this "
                      "run: each is checked at the provider, none is submitted again")

    # -- the caller's side (any thread) --

    def ask(self, endpoint: Endpoint, line: BatchLine) -> concurrent.futures.Future:
        """The future answer (a BatchAnswer) of one request."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._take, endpoint, line, future)
        return future

    def close(self) -> None:
        """Stop polling and the thread (a batch still at the provider stays in the ledger)."""
        if self._loop.is_closed():
            return

        async def cancel_all() -> None:
            await provider.close_dropped_clients()
            # litellm's own workers (its logging queue) live on this loop too.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - shutting down either way
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        for waiters in self._waiters.values():
            for future in waiters:
                if not future.done():
                    future.set_result(BatchAnswer(None, "the run stopped waiting for its batch"))
        self._loop.close()

    # -- the broker's loop --

    def _take(self, endpoint: Endpoint, line: BatchLine, future: concurrent.futures.Future
              ) -> None:
        answer = self._answers.pop(line.custom_id, None)
        if answer is not None:
            future.set_result(answer)
            return
        waiting = self._waiters.setdefault(line.custom_id, [])
        waiting.append(future)
        if len(waiting) > 1:
            return  # the same request is already gathered or submitted
        record = self.ledger.batch_of(line.custom_id)
        if record is None:
            self._gather(endpoint, line)
        elif record.batch_id in self._vouched:
            self._watch(record, endpoint)
        elif record.batch_id in self._checking:
            self._checking[record.batch_id].append((endpoint, line))
        else:  # named by an earlier attempt's ledger: this run's only if the provider says so
            self._checking[record.batch_id] = [(endpoint, line)]
            self._spawn(self._check(record, endpoint))

    def _gather(self, endpoint: Endpoint, line: BatchLine) -> None:
        gathering = self._gathering.setdefault(endpoint, _Gathering())
        if (gathering.lines and (len(gathering.lines) + 1 > self.options.max_requests
                                 or gathering.size + len(line.data) > self.options.max_bytes)):
            self._flush(endpoint)
            gathering = self._gathering.setdefault(endpoint, _Gathering())
        gathering.lines.append(line)
        gathering.size += len(line.data)
        if gathering.started is None:
            gathering.started = self._loop.time()
        elif self._loop.time() - gathering.started > self.options.max_gather_seconds:
            return  # a steady trickle of calls: the pending flush goes ahead, not pushed back
        if gathering.timer is not None:
            gathering.timer.cancel()
        gathering.timer = self._loop.call_later(self.options.gather_seconds, self._flush,
                                                endpoint)

    def _flush(self, endpoint: Endpoint) -> None:
        gathering = self._gathering.pop(endpoint, None)
        if gathering is None or not gathering.lines:
            return
        if gathering.timer is not None:
            gathering.timer.cancel()
        self._spawn(self._submit(endpoint, gathering.lines))

    def _spawn(self, coroutine: Any) -> None:
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _answer(self, custom_id: str, answer: BatchAnswer) -> None:
        waiting = self._waiters.pop(custom_id, [])
        if not waiting:
            self._answers[custom_id] = answer  # asked later (a chunk not started yet)
        for position, future in enumerate(waiting):
            if not future.done():  # the same request asked twice was paid for once
                future.set_result(answer if position == 0 else _unpaid(answer))

    async def _submit(self, endpoint: Endpoint, lines: list[BatchLine]) -> None:
        data = b"".join(line.data for line in lines)
        metadata = batch_metadata(self.ledger.run, [line.custom_id for line in lines])
        try:
            uploaded, created = await provider.submit(endpoint, data, metadata, self._delays)
        except Exception as error:  # noqa: BLE001 - every request gets the reason
            reason = f"batch submission to {endpoint.model} failed: {describe(error)}"
            for line in lines:
                self._answer(line.custom_id, BatchAnswer(None, reason,
                                                         retryable=door.is_transient(error)))
            return
        record = BatchRecord(batch_id=created.id, model=endpoint.model,
                             api_base=endpoint.api_base, input_file_id=uploaded.id,
                             requests={line.custom_id: line.who for line in lines},
                             status=str(created.status or "submitted"))
        self._vouched.add(created.id)
        self.ledger.add(record)
        self.submitted_batches += 1
        self._say(f"batch {created.id} submitted: {len(lines)} request(s) to {endpoint.model}")
        self._watch(record, endpoint)

    async def _check(self, record: BatchRecord, endpoint: Endpoint) -> None:
        """Watch a batch named by the ledger if the provider confirms it; else submit anew."""
        try:
            problem = await problem_at_provider(record, endpoint, self.ledger.run, self._delays)
        except Exception as error:  # noqa: BLE001 - a batch that cannot be confirmed is refused
            problem = f"it could not be read back from the provider ({describe(error)})"
        parked = self._checking.pop(record.batch_id, [])
        if problem is None:
            self._vouched.add(record.batch_id)
            self._watch(record, endpoint)
            return
        self._refuse(record, problem)
        for waiting_endpoint, line in parked:
            self._gather(waiting_endpoint, line)

    def _refuse(self, record: BatchRecord, problem: str) -> None:
        # The id comes from the ledger, whoever wrote it: quoted and cut.
        message = (f"batch {record.batch_id!r:.80} named by the run's ledger was refused: "
                   f"{problem}; its {len(record.requests)} request(s) are submitted anew")
        self.ledger.refuse(record, message)
        self.refused.append(message)
        logger.warning(message)
        self._say(message)

    def _watch(self, record: BatchRecord, endpoint: Endpoint) -> None:
        """Poll the batch until it ends and answer its requests (again, if it has ended)."""
        if record.batch_id not in self._polling:
            self._polling.add(record.batch_id)
            self._spawn(self._poll(record, endpoint))

    async def _poll(self, record: BatchRecord, endpoint: Endpoint) -> None:
        try:
            await self._poll_until_answered(record, endpoint)
        finally:
            self._polling.discard(record.batch_id)

    async def _poll_until_answered(self, record: BatchRecord, endpoint: Endpoint) -> None:
        delay = self.options.first_poll_seconds
        while not record.finished:
            try:
                batch = await provider.retrieve_once(endpoint, record.batch_id)
            except Exception as error:  # noqa: BLE001 - a lost batch is asked again
                if door.is_transient(error):
                    await asyncio.sleep(delay)
                    delay = min(self.options.max_poll_seconds, delay * 1.5)
                    continue
                self._give_up(record, f"batch {record.batch_id} could not be read: "
                                      f"{describe(error)}")
                return
            if record.observe(batch):
                self.ledger.update(record)
                totals = self.ledger.progress()
                self._say(f"{record.progress_line()} (all batches: {totals['submitted']} "
                          f"submitted, {totals['in_progress']} in progress, "
                          f"{totals['completed']} completed, {totals['failed']} failed)")
            if not record.finished:
                await asyncio.sleep(delay)
                delay = min(self.options.max_poll_seconds, delay * POLL_GROWTH)
        output = await self._download_file(record.output_file_id, endpoint)
        errors = await self._download_file(record.error_file_id, endpoint)
        answers = read_answers(output, errors)
        stray = stray_answers(answers, record.requests)
        if stray is not None:
            self._give_up(record, f"batch {record.batch_id} was refused: {stray}")
            return
        missing = BatchAnswer(None, f"batch {record.batch_id} {record.status} without an answer "
                                    "for this request")
        for custom_id in record.requests:
            self._answer(custom_id, answers.get(custom_id, missing))

    async def _download_file(self, file_id: str | None, endpoint: Endpoint) -> bytes | None:
        return await provider.download(endpoint, file_id, self.options.first_poll_seconds)

    def _give_up(self, record: BatchRecord, reason: str) -> None:
        record.status = "failed"
        self.ledger.update(record)
        for custom_id in record.requests:
            self._answer(custom_id, BatchAnswer(None, reason))


def _unpaid(answer: BatchAnswer) -> BatchAnswer:
    """A shared answer for a second asker: no tokens or cost, so nothing is counted twice."""
    if answer.completion is None:
        return answer
    return answer._replace(completion=answer.completion._replace(
        cost_usd=0.0, input_tokens=0, output_tokens=0, cached_input_tokens=0))
