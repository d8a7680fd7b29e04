"""What every chunk task shares: its Prefect retry policy and the context of its judge calls."""

from __future__ import annotations

from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from judges.cache import ReplyCache
from judges.calls import JudgeContext
from judges.model.llm import LLMClient
from judges.model.settings import LLMSettings
from judges.model.usage import Usage

# A chunk is retried whole when it crashes (failed calls are already retried one by one and
# end as error_message). Our reply cache makes reruns free, so Prefect's input hashing of
# whole chunks would be waste.
#
# No tags: a tagged task run asks the API for the tags' concurrency slots before it starts (a
# lease, renewed while it runs), whether or not a limit exists. That round trip took 2-2.8 s
# when the API was busy, and at a chunk boundary nothing else was judging meanwhile. The
# provider's limit across runs is the model's global limit (flows/shards/limits.py).
CHUNK_TASK_OPTIONS = {
    "cache_policy": NO_CACHE,
    "retries": 2,
    "retry_delay_seconds": exponential_backoff(backoff_factor=2),
    "retry_jitter_factor": 0.5,
}


def judge_context(
    settings: LLMSettings, cache_url: str | None, storage_options: dict
) -> JudgeContext:
    """A fresh client, reply cache and usage tally for one chunk's calls."""
    cache = ReplyCache(cache_url, storage_options) if cache_url else None
    return JudgeContext(LLMClient(settings), cache, Usage())
