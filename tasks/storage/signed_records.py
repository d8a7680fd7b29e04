"""MACs over a suite's own records: its baseline pointer, its history entries and history.json.

A run's manifest is signed where it lies (tasks/storage/run_integrity.py); the files that
*point at* runs are signed here, so that whoever can write the bucket cannot name another
run than the one publishing named:

- `baseline.json`: a MAC bound to the suite, the pointer's name and the run id it names, over
  the pointer, which carries the named run's `published_at` (the time its signed manifest
  records; the reader checks both agree, and that no signed record of the suite names a newer
  baseline: tasks/storage/baseline.py).
- `history/{run_id}.json`: a MAC bound to the suite and run id, over the entry.
- `history.json`: a MAC bound to the suite, over the whole file (its entries, each with its
  own MAC, and the ids it leaves out); one that fails is rebuilt from the entry files.

Without a key nothing here is signed or checked, as before.
"""

from __future__ import annotations

from typing import Any

from judges.integrity import SigningKey, as_read_back, canonical

POINTER = "judgeflow/suite-pointer/v1"
HISTORY_ENTRY = "judgeflow/history-entry/v1"
HISTORY_INDEX = "judgeflow/history/v1"
MAC = "mac"
# How an entry read back was taken (HistoryEntry.check): no key, its MAC verified, none, wrong.
UNCHECKED, VERIFIED, UNSIGNED, ALTERED = "unchecked", "verified", "unsigned", "altered"


def _without_mac(value: dict) -> dict:
    return {k: v for k, v in value.items() if k != MAC}


def sign(label: str, binding: dict[str, Any], value: dict, key: SigningKey | None) -> dict:
    """`value` as plain JSON, with its MAC under `label` when there is a key."""
    plain = as_read_back(_without_mac(value))
    if key is not None:
        plain[MAC] = key.mac(label, binding, canonical(plain))
    return plain


def check(label: str, binding: dict[str, Any], value: Any, key: SigningKey | None) -> str:
    """UNCHECKED without a key; else VERIFIED, UNSIGNED (no MAC) or ALTERED (a wrong one)."""
    if key is None:
        return UNCHECKED
    if not isinstance(value, dict) or MAC not in value:
        return UNSIGNED
    content = canonical(as_read_back(_without_mac(value)))
    return VERIFIED if key.verify(label, binding, content, value[MAC]) else ALTERED


def pointer_binding(suite: str, name: str, run_id: str) -> dict[str, str]:
    """What a pointer's MAC is bound to: its suite, its own name, the run it names."""
    return {"suite": suite, "pointer": name, "run_id": run_id}


def entry_binding(suite: str, run_id: str) -> dict[str, str]:
    """What a history entry's MAC is bound to."""
    return {"suite": suite, "run_id": run_id}


def index_binding(suite: str) -> dict[str, str]:
    """What history.json's MAC is bound to."""
    return {"suite": suite}
