"""Per-tag slices: `tag/{tag}/{name}`."""

from __future__ import annotations

TAG_PREFIX = "tag/"


def tag_key(tag: str) -> str:
    """A tag as one segment of a metric name: '/' and '%' percent-encoded."""
    return tag.replace("%", "%25").replace("/", "%2F")


def tag_metric(tag: str, name: str) -> str:
    """`tag/{tag}/{name}`, e.g. tag/billing/response/llm_judged/correctness/rating/percentage."""
    return f"{TAG_PREFIX}{tag_key(tag)}/{name}"
