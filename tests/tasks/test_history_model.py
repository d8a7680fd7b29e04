"""Every interleaving of concurrent publishers of a suite's history, stepped through the real code.

The claim (tasks/storage/history.py, `record_in_history`): after the last writer finishes,
history.json holds every writer's entry, newest first, and index.html shows the same entries.
tests/history_model.py derives each writer's steps from the real `record_in_history` and walks
every interleaving of them over a store with S3's semantics (docs/history.md).
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from tasks.storage import outputs
from tasks.storage.history import record_in_history
from tests.history_model import LANDED, LATE, LOST, Replay, explore
from tests.history_nights import expected, planted

SUITE_DIR = "model-bucket/evals/nightly"


def _page(suite: str, entries: list) -> str:
    # The rows a reader sees, one run id a line (the real page is rendered in test_history).
    return "\n".join(entry.run_id for entry in entries)


def _writers(count: int) -> list:
    def writer(manifest: dict, metrics: dict):
        def publish(store: Replay) -> None:
            location = outputs.RunLocation("s3://model-bucket/evals", manifest["suite"],
                                           manifest["run_id"])
            location.fs = store  # the scripted store in place of s3fs
            record_in_history(location, manifest, metrics, _page)
        return publish

    return [writer(m, x) for _, m, x in planted(count)]


def _claim(count: int):
    newest_first = [night.run_id for night in expected(count)][::-1]

    def claim(objects) -> str:
        raw = objects.get(f"{SUITE_DIR}/history.json")
        listed = [e["run_id"] for e in json.loads(raw)["entries"]] if raw else []
        if listed != newest_first:
            return f"history.json lists {listed}, not {newest_first}"
        page = objects.get(f"{SUITE_DIR}/index.html", b"").decode().split()
        return "" if page == newest_first else f"index.html shows {page}, not {newest_first}"

    return claim


@pytest.fixture(autouse=True)
def _quick_uploads(monkeypatch):
    # A retried upload waits before its next attempt: in the model only the order counts.
    monkeypatch.setattr(outputs, "WRITE_BACKOFF_SECONDS", 0.0)
    # Each upload goes through a scratch folder, and the real code runs a few thousand times.
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")


def test_every_interleaving_of_three_publishers_keeps_every_entry():
    checked = explore(_writers(3), _claim(3))
    print(f"3 writers: {checked.interleavings} interleavings, {checked.states} states, "
          f"{checked.code_runs} runs of the real code, {checked.failing} failing")
    assert (checked.failing, checked.problem) == (0, ""), checked.first_failure
    # 4,189,185,463,590 when measured: every order of every call, none left out
    assert checked.interleavings > 4 * 10**12


def test_every_interleaving_of_two_publishers_with_failed_puts_keeps_every_entry():
    # A PUT that answered an error either never landed or landed before its retry (S3 keeps
    # the request with the latest timestamp, so a retried PUT is never overwritten by the
    # attempt before it); Publisher retries it.
    checked = explore(_writers(2), _claim(2), faults=1, kinds=(LOST, LANDED))
    print(f"2 writers, a failed PUT each: {checked.interleavings} interleavings, "
          f"{checked.states} states, {checked.failing} failing")
    assert (checked.failing, checked.problem) == (0, ""), checked.first_failure
    assert checked.interleavings > 3 * 10**6


def test_a_store_that_lands_an_abandoned_put_late_can_lose_an_entry():
    """What the protocol relies on: the model finds the loss when a PUT lands after its retry.

    S3 does not do this, but a relay that forwards a request after its client gave up on it
    can (the tests' fault proxy relays a delayed request whether or not the client still waits).
    """
    checked = explore(_writers(2), _claim(2), faults=1, kinds=(LATE,))
    assert checked.failing > 0
    assert checked.first_failure[-1].endswith("late PUT lands")
    assert "nightly-20240302" in checked.problem  # the second writer's entry is what is lost
