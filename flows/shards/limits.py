"""The provider's limit across machines: a Prefect global concurrency limit named after the model.

Each shard keeps its own in-process limits (its share of concurrency, RPM and TPM: fine-grained
and free); the global limit is the coarse cap that holds across shards and across overlapping
runs on the same model. Its slots are taken once per run, by the parent, for as long as its
shards judge, and each shard's concurrency is its share of the slots the parent got:

- per call, an API round trip would cost more than many calls themselves (PREFECT_NOTES.md:
  Prefect's limiter manages under one start per second under a burst);
- per shard, a shard killed mid-way cannot release its slots: the server keeps a lease for at
  least 60 s, so the retried shard would first wait for its own ghost;
- the parent outlives every attempt of every shard, and one acquisition per run costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect import get_client, get_run_logger
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

LIMIT_PREFIX = "judgeflow-model-"
# The server's minimum lease: a parent that dies frees its slots a minute later.
LEASE_SECONDS = 60
_UNSAFE = re.compile(r"[^a-z0-9]+")


def limit_name(model: str) -> str:
    """`judgeflow-model-openai-gpt-4o-mini` for `openai/gpt-4o-mini`."""
    return LIMIT_PREFIX + (_UNSAFE.sub("-", model.lower()).strip("-") or "unnamed")[:100]


async def ensure_limit(name: str, default_limit: int) -> int:
    """The limit's size, creating it with `default_limit` slots if there is none.

    An existing limit is left as its operator set it: it caps this run too.
    """
    async with get_client() as client:
        try:
            return (await client.read_global_concurrency_limit_by_name(name)).limit
        except ObjectNotFound:
            pass
        try:
            await client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=name, limit=default_limit))
        except ObjectAlreadyExists:  # another run created it meanwhile
            pass
        return (await client.read_global_concurrency_limit_by_name(name)).limit


@asynccontextmanager
async def model_slots(model: str, wanted: int) -> AsyncIterator[int]:
    """Hold up to `wanted` slots of the model's global limit; yields how many were taken.

    Waits while overlapping runs hold them. A limit smaller than `wanted` caps the run.
    """
    name = limit_name(model)
    size = await ensure_limit(name, wanted)
    taken = max(1, min(wanted, size))
    if taken < wanted:
        get_run_logger().warning("global concurrency limit %r has %d slots: the run's shards "
                                 "share %d calls in flight, not %d", name, size, taken, wanted)
    get_run_logger().info("taking %d slots of global concurrency limit %r", taken, name)
    async with concurrency(name, occupy=taken, lease_duration=LEASE_SECONDS, strict=True):
        yield taken
