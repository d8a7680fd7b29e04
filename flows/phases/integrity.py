"""The manifest's `integrity` section: what this run trusted of what it read back, and why.

With $JUDGEFLOW_SIGNING_KEY every cache entry, stored chunk and published run read back was
checked (judges/integrity.py); the section counts what was refused and judged again, and says
how the baseline and the calibration source were taken. Without a key it says the bucket was
trusted as found. Publishing adds the files' digests and the manifest's own MAC
(tasks/storage/run_integrity.py).

Counts cover this process: the reply cache entries refused in every chunk judged here or by a
shard (each chunk's usage carries its count), and the stored chunks this process read. A
shard that resumed chunks of its own counts those in its own process only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prefect import get_run_logger

from judges.integrity import signing_fields, signing_key
from judges.model.usage import Usage


def integrity_section(usages: Iterable[Usage], store: Any, *, calibration: str | None = None,
                      baseline: str | None = None, baseline_refused: str | None = None,
                      baseline_pointer: str | None = None) -> dict:
    """The section, and a warning on the run's log when anything was refused.

    Args:
        usages: every usage tally of the run's judge calls (judging, head-to-head).
        store: the run's chunk store or a view of it (anything with `rejected`), or None.
        calibration: the run id whose calibration was reused, if any. It was read with the
            same key: had it been refused, the run would have stopped before judging.
        baseline: how a regression's baseline was taken ("verified", "unchecked",
            "refused"); None for runs without one.
        baseline_refused: why it was refused.
        baseline_pointer: how the suite's baseline.json was taken when it named the baseline
            ("verified": its MAC and recency; "unchecked": no key; "refused"); None when the
            baseline was named explicitly or there was none.
    """
    key = signing_key()
    rejected_cache = sum(u.cache_rejected for u in usages)
    rejected_chunks = getattr(store, "rejected", 0) if store is not None else 0
    section: dict[str, Any] = {**signing_fields(key), "rejected_cache_entries": rejected_cache,
                               "rejected_chunks": rejected_chunks}
    refused_batches = list(getattr(store, "refused_batches", None) or [])
    if refused_batches:  # a batch ledger entry the provider did not confirm (batch mode)
        section["refused_batches"] = refused_batches
    if calibration is not None:
        section["calibration_source"] = "verified" if key is not None else "unchecked"
    if baseline is not None:
        section["baseline"] = baseline
        section["baseline_refused"] = baseline_refused
        section["baseline_pointer"] = baseline_pointer
    if rejected_cache or rejected_chunks:
        get_run_logger().warning(
            "%d reply cache entries and %d stored chunks had no valid MAC (unsigned, altered, "
            "or signed with another key) and were judged again", rejected_cache, rejected_chunks)
    return section
