"""The one door to models: litellm's async API under adaptive limits and retries, or a local model.

The pieces: how a model is reached (judges/model/settings.py), what a call returns and costs
(judges/model/usage.py), in-process models (judges/model/local_models.py), the request
(judges/model/request.py), litellm itself (judges/model/litellm_door.py), the process-wide limits
(judges/model/limits.py, judges/model/pacing.py) and what a failure means (judges/model/retry.py).
This module puts them together; the rest of judgeflow imports the model layer from here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from fractions import Fraction

from pydantic import BaseModel

import judges.model.litellm_door as door
from judges.model.batch.current import current_batches
from judges.model.batch.provider import Endpoint
from judges.model.batch.requests import batch_body, batch_line, custom_id_of, who_asks
from judges.model.budget import Budget, BudgetReached, current_budget
from judges.model.in_flight import SentCall, send_within_limits
from judges.model.limits import estimate_tokens, limits_for
from judges.model.local_models import is_local_model, local_model
from judges.model.pricing import model_prices, most_call_cost, priced
from judges.model.request import request_for
from judges.model.retry import (
    CLOCK,
    backoff_delay,
    describe_error,
    retry_after_seconds,
    status_of,
)
from judges.model.settings import LLMSettings
from judges.model.usage import Completion, LLMCallError, Usage

__all__ = ["LLMClient", "prepare_model"]


class BatchRequestFailed(LLMCallError):
    """A request its batch failed, let expire or did not return."""

    def __init__(self, message: str, retryable: bool, status: int | None = None):
        super().__init__(message)
        self.retryable, self.status = retryable, status


# Models that refused a response_format schema with a 400 in this process (e.g. an older
# Azure API version): asked without one from then on.
_MODELS_WITHOUT_SCHEMA: set[str] = set()
_PREPARED_MODELS: set[str] = set()


def prepare_model(settings: LLMSettings) -> None:
    """Import litellm and look the model up now, so that no call pays for it on the event loop.

    Cheap after the first time; a local model needs nothing; a panel prepares each member.
    """
    if settings.members:
        for member in settings.members:
            prepare_model(member)
        return
    if is_local_model(settings.model) or settings.model in _PREPARED_MODELS:
        return
    door.prepare(settings.model)
    _PREPARED_MODELS.add(settings.model)


class LLMClient:
    """Async chat completions for one judge model, bounded by the process-wide limits."""

    def __init__(self, settings: LLMSettings):
        self.settings = settings
        self._local = local_model(settings.model)
        self._limits = limits_for(
            settings.model, settings.api_base, settings.concurrency, settings.rpm, settings.tpm,
            settings.max_concurrency)

    async def complete(
        self,
        messages: list[dict],
        usage: Usage,
        response_format: type[BaseModel] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Completion:
        """One chat completion, retried on transient errors.

        Args:
            messages: the chat messages to send.
            usage: the tally this call's calls, retries, tokens and cost are added to.
            response_format: the reply's model, sent as a schema where the model supports it.
            metadata: who asks (e.g. {"judge": name}); read by local models, not sent.

        Raises:
            LLMCallError: when the error is not transient or the attempts are used up.
        """
        if self._local is not None:
            return self._answer_locally(messages, usage, metadata or {})
        if self.settings.model not in _PREPARED_MODELS:
            # The model's first call: the import and lookups in a thread, off the event loop.
            await asyncio.to_thread(prepare_model, self.settings)
        batches = current_batches()
        answered_at_refusal: int | None = None  # the endpoint's answered calls at our last 429
        for attempt in range(1, self.settings.max_attempts + 1):
            online = batches is None or (attempt > 1 and batches.options.retry == "online")
            try:
                if online:
                    completion = await self._attempt(messages, response_format)
                else:
                    completion = await self._batched(messages, response_format, metadata,
                                                     attempt)
            except BudgetReached:
                usage.failures += 1
                raise
            except BatchRequestFailed as error:
                if response_format is not None and self._schema_refused(error):
                    return await self.complete(messages, usage, None, metadata)
                # Asked again in the next batch (or online): the wait was the batch's own.
                if not error.retryable or attempt == self.settings.max_attempts:
                    usage.failures += 1
                    raise LLMCallError(f"{error} (after {attempt} attempt(s))") from None
                usage.retries += 1
                continue
            except Exception as error:  # noqa: BLE001 - classified right below
                if response_format is not None and self._schema_refused(error):
                    # Ask again at once, without the schema (not counted as an attempt).
                    return await self.complete(messages, usage, None, metadata)
                if not door.is_transient(error) or attempt == self.settings.max_attempts:
                    usage.failures += 1
                    raise LLMCallError(describe_error(error, attempt, self.settings)) from None
                usage.retries += 1
                round_trip = None
                if door.is_rate_limited(error):
                    # A first refusal, or one after others were answered: one call too many,
                    # not a closed door, so it is retried quickly (judges/model/retry.py).
                    congestion = self._limits.congestion
                    if answered_at_refusal is None or congestion.answered > answered_at_refusal:
                        round_trip = congestion.round_trip
                    answered_at_refusal = congestion.answered
                await CLOCK.sleep(backoff_delay(self.settings, attempt, error, round_trip))
                continue
            usage.count_success(completion)
            return completion._replace(attempts=attempt)
        raise AssertionError("unreachable")

    def _answer_locally(
        self, messages: list[dict], usage: Usage, metadata: Mapping[str, str]
    ) -> Completion:
        started = time.perf_counter()
        try:
            text = self._local(messages, metadata)
        except Exception as error:  # noqa: BLE001 - a row's error, never a crashed chunk
            usage.failures += 1
            raise LLMCallError(f"local model {self.settings.model!r} failed: {error!r}") from None
        usage.calls += 1
        return Completion(text, 0, 0, 0.0, latency_seconds=time.perf_counter() - started)

    def _most_cost(self, messages: list[dict], schema: type[BaseModel] | None,
                   batch: bool = False) -> Fraction:
        """The most the next attempt can cost (online or in a batch), as a budget reserves it.

        0 for an unpriced model, which a budget run refuses before it starts.

        Raises:
            BudgetReached: the request sends no reply cap, so its cost has no bound (a budget
                run is refused before it starts without one: flows/preflight/budget.py).
        """
        prices = model_prices(self.settings)
        if prices is None:
            return Fraction(0)
        cap = self.settings.max_tokens or 0
        if not cap and prices.rates(batch)[2] > 0:  # free output needs no cap
            raise BudgetReached(f"run budget reached: a call to {self.settings.model} sends no "
                                "reply cap (max_tokens), so its cost has no bound; not made")
        return most_call_cost(prices, messages, schema, cap, batch=batch)

    def _settle(self, budget: Budget, hold: Fraction, completion: Completion) -> None:
        """Count an answered call's cost; a reply billed past its cap stops the run's calls."""
        budget.settle(hold, completion.cost_usd)
        cap = self.settings.max_tokens
        if cap and completion.output_tokens > cap:
            budget.billed_past_cap(self.settings.model, completion.output_tokens, cap)

    def _schema_refused(self, error: Exception) -> bool:
        """A 400 about structured output: remember that this model takes no schema."""
        text = str(error).lower()
        status = error.status if isinstance(error, BatchRequestFailed) else status_of(error)
        refused = status == 400 and any(
            word in text for word in ("response_format", "json_schema", "schema")
        )
        if refused:
            _MODELS_WITHOUT_SCHEMA.add(self.settings.model)
        return refused

    def _schema(self, response_format: type[BaseModel] | None) -> type[BaseModel] | None:
        """The schema to send, if the model takes one."""
        model = self.settings.model
        if model in _MODELS_WITHOUT_SCHEMA or not door.supports_schema(model):
            return None
        return response_format

    async def _attempt(
        self, messages: list[dict], response_format: type[BaseModel] | None
    ) -> Completion:
        limits = self._limits
        schema = self._schema(response_format)
        request = request_for(self.settings, messages, schema)
        call = SentCall(limits, estimate_tokens(messages, self.settings.max_tokens))
        budget = current_budget()
        if budget is not None:  # reserved once admitted, so that waiting calls hold nothing
            most = self._most_cost(messages, schema)
            call.reserve_budget = lambda: budget.hold(most)
        try:
            completion = await send_within_limits(call, request)
        except BaseException as error:
            limits.tokens.settle(call.reserved, 0)  # a failed call spent (almost) nothing
            if budget is not None:
                # A reply lost in flight may still be billed: its hold stays spent.
                budget.settle(call.budget_hold,
                              call.budget_hold if door.may_be_billed(error) else 0)
            if not isinstance(error, BudgetReached):
                self._observe_failure(error, call)
            raise
        limits.congestion.on_success(window_full=limits.gate.full())
        if call.stamp is not None:
            limits.window.answered(call.stamp)
        limits.congestion.on_answer(completion.latency_seconds)
        limits.tokens.settle(call.reserved, completion.input_tokens + completion.output_tokens)
        completion = priced(self.settings, completion)
        if budget is not None:
            self._settle(budget, call.budget_hold, completion)
        return completion

    async def _batched(self, messages: list[dict], response_format: type[BaseModel] | None,
                       metadata: Mapping[str, str] | None, attempt: int) -> Completion:
        """One attempt through the run's batches: the same request, answered by a batch."""
        batches = current_batches()
        schema = self._schema(response_format)
        request = request_for(self.settings, messages, schema)
        model_name, provider = door.batch_route(self.settings.model, self.settings.api_base)
        endpoint = Endpoint(provider, self.settings.model, model_name, self.settings.api_base,
                            request.get("api_key"))
        body = batch_body(request, model_name,
                          door.response_format_param(request.get("response_format")))
        who = who_asks(metadata)
        line = batch_line(custom_id_of(body, who, attempt), body, who)
        budget = current_budget()
        hold = (budget.reserve(self._most_cost(messages, schema, batch=True))
                if budget is not None else Fraction(0))
        answer = await asyncio.wrap_future(batches.ask(endpoint, line))
        if answer.completion is None:
            if budget is not None:
                budget.settle(hold, 0.0)
            raise BatchRequestFailed(answer.error or "batch request failed", answer.retryable,
                                     answer.status)
        completion = priced(self.settings, answer.completion, batch=True)
        if budget is not None:
            self._settle(budget, hold, completion)
        return completion

    def _observe_failure(self, error: BaseException, call: SentCall) -> None:
        """A 429 slows the model down; a Retry-After pauses every call to it.

        Unless the 429 was one call too many while the provider answers others
        (judges/model/rate_window.py): then only the refused call waits its Retry-After.
        """
        if not isinstance(error, Exception):
            return  # cancelled: says nothing about the provider
        limits = self._limits
        hinted = retry_after_seconds(error)
        if door.is_rate_limited(error):
            if call.refusal_observed:
                return  # by the hooks, as the reply arrived (judges/model/in_flight.py)
            if call.stamp is not None:
                limits.observe_refusal(call.epoch, call.stamp, hinted, limits.gate.in_flight,
                                       call.departed)
                return
            limits.congestion.on_rate_limited(call.epoch)
        if hinted and door.is_transient(error):
            limits.congestion.pause(hinted)
