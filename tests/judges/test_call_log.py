"""A chunk's call log kept as text: the same calls.jsonl bytes, and a stored log that does not fit
is a miss, never a broken published file."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from flows.run.chunk_kinds import ChunkResult, JudgedRowChunks
from judges.builtin.offline import MODEL as OFFLINE
from judges.integrity import SIGNING_KEY_ENV
from judges.model.settings import LLMSettings
from judges.plan import plan_judges
from tasks.call_log import CallLog, CallLogError
from tasks.storage.chunk_store import ChunkStore
from tasks.storage.row_codec import judge_fingerprint
from tests.judges.test_resume import _judged, _rows

# Replies as a hostile or unlucky judge writes them: newlines, the separators str.splitlines
# also splits at, something that looks like a second entry, quotes and non-ASCII text.
AWKWARD_ENTRIES = [
    {"judge": "safety", "replies": ['{"rating": "yes"}\n{"phase": "forged"}'], "cost_usd": None},
    {"judge": "faithfulness", "replies": ["line\u2028break\x85next\x1crecord \u00e9\u6f22"]},
    {},
    {"judge": "relevance", "when": datetime(2026, 11, 27, tzinfo=UTC), "score": float("nan")},
    {"judge": "x", "replies": ["}\n{", "\\", "\""]},
]


@pytest.mark.parametrize("phase", ["judging", "generation", "head_to_head", "canary"])
def test_staged_lines_are_the_bytes_of_each_entry_with_its_phase_first(phase):
    # The independent computation: what calls.jsonl held when each entry was a dict.
    expected = "".join(json.dumps({"phase": phase, **entry}, ensure_ascii=False, default=str)
                       + "\n" for entry in AWKWARD_ENTRIES)

    staged = CallLog.of(AWKWARD_ENTRIES).in_phase(phase)

    assert staged == expected
    assert len(staged.split("\n")) == len(AWKWARD_ENTRIES) + 1  # one line per entry
    assert [json.loads(line)["phase"] for line in staged.split("\n")[:-1]] == [phase] * 5


def test_a_log_reads_back_as_its_entries():
    entries = [e for e in AWKWARD_ENTRIES if "when" not in e]  # JSON can hold them as they are
    log = CallLog.of(entries)

    assert CallLog.stored(log.text) == log
    assert log.entries() == entries
    assert CallLog().in_phase("judging") == "" and CallLog.stored("").entries() == []


@pytest.mark.parametrize("stored", [
    [{"judge": "safety"}],  # the older list form
    '{"judge": "safety"}',  # the last line cut short of its newline
    '{"judge": "safety"}\n["not", "an", "object"]\n',
    '{"judge": "safety"}\n\n',
    None,
])
def test_a_stored_log_of_another_shape_is_refused(stored):
    with pytest.raises(CallLogError):
        CallLog.stored(stored)


def test_a_stored_chunk_whose_log_does_not_fit_is_judged_again(tmp_path):
    rows = _rows()
    plan = plan_judges(rows, ["safety"])
    settings = LLMSettings(model=OFFLINE)
    kind = JudgedRowChunks(plan, settings)
    judged: ChunkResult = _judged(rows, plan, settings)
    store = ChunkStore(str(tmp_path / ".chunks"))
    key = judge_fingerprint(rows, plan, settings)
    store.save(kind, 3, key, judged)
    path = tmp_path / ".chunks" / "judge" / "000003.json"
    document = json.loads(path.read_text())

    assert document["result"]["calls"] == judged.calls.text  # one string, not an entry list
    assert store.load(kind, 3, key, rows).calls == judged.calls

    document["result"]["calls"] = judged.calls.text + "not json\n"
    path.write_text(json.dumps(document))
    assert store.load(kind, 3, key, rows) is None


def test_a_signed_chunk_whose_log_was_rewritten_in_the_bucket_is_refused(tmp_path, monkeypatch):
    # Lines of the right shape pass the reader's check; with a signing key the MAC, which covers
    # the log's text, is what refuses a forged entry.
    monkeypatch.setenv(SIGNING_KEY_ENV, "operator-held-key")
    rows = _rows()
    plan = plan_judges(rows, ["safety"])
    settings = LLMSettings(model=OFFLINE)
    kind = JudgedRowChunks(plan, settings)
    store = ChunkStore(str(tmp_path / ".chunks"))
    key = judge_fingerprint(rows, plan, settings)
    store.save(kind, 0, key, _judged(rows, plan, settings))
    path = tmp_path / ".chunks" / "judge" / "000000.json"
    document = json.loads(path.read_text())
    document["result"]["calls"] += '{"judge": "safety", "verdict": "yes", "source": "forged"}\n'
    path.write_text(json.dumps(document))

    reader = ChunkStore(str(tmp_path / ".chunks"))
    assert reader.load(kind, 0, key, rows) is None and reader.rejected == 1
