"""A batch bound to the run that submitted it, and checked at the provider before it is trusted.

Without a signing key the ledger in the run's folder is not signed, and whoever can write that
folder could plant an entry naming any batch on a shared endpoint (one they submitted, with
the run's custom_ids and bodies of their own choosing): its answers would become the verdicts.
So a batch read back from the ledger is believed only after the provider itself says it is
this run's:

- when submitting, the batch's metadata names the run (`suite/run_id`) and a digest of its
  custom_ids (each of which is a hash of its request's body and who asks);
- on resume, the batch is read back from the provider (never its state from the ledger): its
  metadata must name this run and these requests, its input file must be the one recorded,
  and every line of that file must be a request this run makes: its custom_id must be the hash
  of the body it carries and of who asks, so no other body can hide behind our ids;
- when its answers are read, every custom_id in the output and error files must be one of the
  batch's requests.

A batch that fails a check is refused: logged, marked refused in the ledger, and its requests
submitted anew. A batch this process submitted itself needs no check.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from judges.model.batch.ledger import BatchRecord
from judges.model.batch.provider import Delays, Endpoint, download, retrieve
from judges.model.batch.requests import custom_id_of

RUN_KEY = "judgeflow_run"
REQUESTS_KEY = "judgeflow_requests"
MAX_METADATA_VALUE = 512  # OpenAI's limit on a metadata value


def requests_digest(custom_ids: Iterable[str]) -> str:
    """sha256 of a batch's custom_ids, in sorted order."""
    return hashlib.sha256("\n".join(sorted(custom_ids)).encode()).hexdigest()


def batch_metadata(run: str, custom_ids: Iterable[str]) -> dict[str, str]:
    """The metadata a batch is created with: the run and the digest of its requests."""
    return {"source": "judgeflow", RUN_KEY: run[:MAX_METADATA_VALUE],
            REQUESTS_KEY: requests_digest(custom_ids)}


def metadata_problem(batch: Any, run: str, input_file_id: str,
                     requests: Mapping[str, dict]) -> str | None:
    """Why the provider's batch is not this run's (None: its metadata and input file agree)."""
    metadata = getattr(batch, "metadata", None) or {}
    if not isinstance(metadata, Mapping) or metadata.get(RUN_KEY) != run[:MAX_METADATA_VALUE]:
        return f"its metadata at the provider does not name this run ({run!r})"
    if metadata.get(REQUESTS_KEY) != requests_digest(requests):
        return "its metadata at the provider names other requests than the ledger's"
    if getattr(batch, "input_file_id", None) != input_file_id:
        return "its input file at the provider is not the one the ledger recorded"
    return None


def input_problem(data: bytes | None, requests: Mapping[str, dict]) -> str | None:
    """Why the batch's input file is not exactly these requests (None: it is)."""
    seen: set[str] = set()
    for raw in (data or b"").splitlines():
        try:
            line = json.loads(raw)
            custom_id, body = line["custom_id"], line["body"]
            attempt = int(str(custom_id).rsplit("-", 1)[1])
        except (ValueError, TypeError, KeyError, IndexError):
            return "its input file holds a line that is not a request of this run"
        who = requests.get(custom_id)
        if who is None or custom_id_of(body, who, attempt) != custom_id:
            return f"its input file holds a request this run does not make ({custom_id!r:.60})"
        seen.add(custom_id)
    if seen != set(requests):
        return "its input file lacks requests the ledger says it holds"
    return None


def stray_answers(answered: Iterable[str], requests: Mapping[str, dict]) -> str | None:
    """Why a finished batch's answers are not all its own requests' (None: they are)."""
    stray = [custom_id for custom_id in answered if custom_id not in requests]
    if stray:
        return f"its output answers {len(stray)} request(s) it was not given ({stray[0]!r:.60})"
    return None


async def problem_at_provider(record: BatchRecord, endpoint: Endpoint, run: str | None,
                              delays: Delays) -> str | None:
    """Why the provider's batch is not this run's; None, with its state taken, if it is."""
    batch = await retrieve(endpoint, record.batch_id, delays)
    problem = metadata_problem(batch, run, record.input_file_id, record.requests)
    if problem is not None:
        return problem
    data = await download(endpoint, record.input_file_id, delays.first)
    if data is None:
        return "its input file could not be read back from the provider"
    problem = input_problem(data, record.requests)
    if problem is None:
        record.observe(batch)  # its state is the provider's, never the ledger's
    return problem
