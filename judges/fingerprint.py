"""A run's judge fingerprint: everything that can change a verdict, per judge, and one digest.

Two runs' verdicts can be compared only when the same judge gave them: same model string and
endpoint, same sampling (temperature, reply cap, samples per verdict), same prompt template and
judge version. The fingerprint records exactly that, per judge (keyed by output prefix), and a
sha256 over all of it; `differences` says, in words, how two fingerprints differ for a judge.
Runs published before the fingerprint existed are read from their manifest's `judge` and
`judges` sections (samples then unknown, which counts as a difference when it matters).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from judges.base import JudgeSpec
from judges.model.settings import LLMSettings

# Each part of a judge's identity, with the words used when it differs.
PARTS = (("model", "model"), ("api_base", "endpoint"), ("temperature", "temperature"),
         ("max_tokens", "reply cap"), ("samples", "samples per verdict"),
         ("version", "judge version"), ("prompt_hash", "prompt"),
         ("answered_by", "model the provider says answered"), ("members", "panel members"))


def judge_identity(spec: JudgeSpec, settings: LLMSettings,
                   answered_by: Iterable[str] = ()) -> dict[str, Any]:
    """What identifies one judge's verdicts in this run (a panel's: each member's too)."""
    identity = {"name": spec.name, "model": settings.model, "api_base": settings.api_base,
                "temperature": settings.temperature, "max_tokens": settings.max_tokens,
                "samples": spec.samples, "version": spec.version,
                "prompt_hash": spec.prompt_hash, "answered_by": sorted(answered_by)}
    if settings.members:  # one judge model's identity stays as it was
        identity["members"] = [member.member_identity() for member in settings.members]
    return identity


# Recorded, compared by `differences`, but not part of the digest: a run whose replies all came
# from the cache made no call, so it knows nothing of what answered, and the same judge must
# keep the same digest (issue 45, item 8).
OBSERVED = ("answered_by",)


def fingerprint(judges: list[JudgeSpec] | tuple[JudgeSpec, ...], settings: LLMSettings,
                answered_by: Iterable[str] = ()) -> dict[str, Any]:
    """The run's fingerprint: each judge's identity by prefix, and one digest over them.

    `answered_by` is what the provider said answered the run's model calls (every judge of a
    run calls the same model); empty when every reply came from the cache. It is recorded per
    judge but left out of the digest, which covers only what the run configured; a provider's
    model change behind the same name shows in `changed` (from `differences`).
    """
    answered = sorted(set(answered_by))
    parts = {spec.prefix: judge_identity(spec, settings, answered) for spec in judges}
    configured = {prefix: {k: v for k, v in identity.items() if k not in OBSERVED}
                  for prefix, identity in parts.items()}
    text = json.dumps(configured, sort_keys=True, separators=(",", ":"))
    return {"digest": hashlib.sha256(text.encode()).hexdigest(), "judges": parts}


def changed(manifest: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether any judge of fingerprint `now` differs from the one a published run recorded.

    Compared judge by judge (`differences`): a run that made no call (every reply from the
    cache) is not a change of what answered; a judge the run did not record is.
    """
    recorded = recorded_judges(manifest)
    return any(differences(recorded.get(prefix), identity)
               for prefix, identity in now["judges"].items())


def recorded_judges(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each judge's identity as a published run recorded it, by prefix."""
    recorded = (manifest.get("judge_fingerprint") or {}).get("judges")
    if recorded:
        return dict(recorded)
    judge = manifest.get("judge") or {}
    out = {}
    for entry in manifest.get("judges") or []:
        area = "response" if entry.get("kind") == "answer" else "retrieval"
        prefix = entry.get("prefix") or f"{area}/llm_judged/{entry.get('name')}"
        out[prefix] = {"name": entry.get("name"), "model": judge.get("model"),
                       "api_base": judge.get("api_base"),
                       "temperature": judge.get("temperature"), "max_tokens": None,
                       "samples": None, "version": entry.get("version"),
                       "prompt_hash": entry.get("prompt_hash")}
    return out


def differences(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[str]:
    """How a judge's identity changed, in words (empty: the same judge)."""
    if before is None:
        return ["the baseline run did not record this judge"]
    changed = []
    for field, words in PARTS:
        old, new = before.get(field), now.get(field)
        if field == "samples" and old is None and new == 1:
            continue  # runs before the fingerprint drew one sample per verdict
        if field == "answered_by" and (not old or not new):
            continue  # one of the runs made no call (replies from the cache): nothing to say
        if old != new:
            changed.append(f"{words} {old!r} → {new!r}")
    return changed
