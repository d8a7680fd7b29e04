"""The counts published beside every aggregate: how many units were rated, how many failed."""

from __future__ import annotations


def count_names(prefix: str) -> tuple[str, str]:
    """The `rated_count` and `error_count` metrics beside a judge's (or metric's) aggregate."""
    return f"{prefix}/rated_count", f"{prefix}/error_count"
