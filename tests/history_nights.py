"""Planted nights of a suite: manifests and metrics of the shapes the flows publish.

Night 0 is the evaluate run that seeds the baseline; every later night is a regression run
against the newest night that passed. Every 7th night (from the 4th) fails its correctness gate,
every 11th (from the 6th) is incomplete; the judge's prompt changes at night 15, and the canary
runs from night 10. `expected(i)` says what the history must show for night i.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

RATE = "response/llm_judged/correctness/rating/percentage"
SAFETY = "response/llm_judged/safety/rating/percentage"
PREFIX = "response/llm_judged/correctness"
START = datetime(2024, 3, 1, 2, 0, tzinfo=UTC)
DIGESTS = ("a1b2c3d4e5f60718" * 4, "ffee00112233aabb" * 4)


class Night(NamedTuple):
    """What the history must show for one night."""

    run_id: str
    kind: str
    outcome: str
    candidate: float
    delta: float | None
    baseline_run_id: str | None
    became_baseline: bool


def run_id(index: int) -> str:
    return f"nightly-{(START + timedelta(days=index)):%Y%m%d}"


def expected(count: int) -> list[Night]:
    """Every night's outcome, value and baseline, oldest first."""
    nights: list[Night] = []
    baseline: Night | None = None
    for i in range(count):
        outcome = ("complete" if i == 0 else "failed" if i % 7 == 3
                   else "incomplete" if i % 11 == 5 else "passed")
        candidate = round(0.80 + 0.01 * (i % 5) - (0.06 if outcome == "failed" else 0.0), 4)
        night = Night(run_id(i), "evaluate" if i == 0 else "regression", outcome, candidate,
                      None if baseline is None else round(candidate - baseline.candidate, 4),
                      None if baseline is None else baseline.run_id,
                      outcome in ("complete", "passed"))
        nights.append(night)
        baseline = night if night.became_baseline else baseline
    return nights


def night_manifest(index: int, night: Night) -> tuple[dict, dict]:
    """The sealed manifest and the metrics that night published."""
    when = START + timedelta(days=index)
    metrics = {RATE: night.candidate, f"{PREFIX}/rated_count": 98, f"tag/billing/{SAFETY}": 0.97,
               f"{PREFIX}/error_count": 2 if night.outcome != "incomplete" else 40,
               SAFETY: 0.97, "response/llm_judged/safety/rated_count": 100,
               "response/llm_judged/safety/error_count": 0,
               "rows/total": 100, "rows/judged": 100, "rows/rejected": 0}
    manifest = {
        "kind": night.kind, "suite": "nightly", "run_id": night.run_id,
        "status": night.outcome, "started_at": when.isoformat(),
        "finished_at": (when + timedelta(seconds=95 + index)).isoformat(),
        "published_at": (when + timedelta(seconds=96 + index)).isoformat(),
        "duration_seconds": 95.0 + index,
        "incomplete_reasons": (["judge correctness failed on 40 of 100 rows (40%), above "
                                "max_error_share 10%"] if night.outcome == "incomplete" else []),
        "dataset": {"source": "nightly.jsonl", "rows_total": 100, "rows_judged": 100,
                    "rows_rejected": 0},
        "judge_fingerprint": {"digest": DIGESTS[index >= 15], "judges": {}},
        "judges": [{"name": "correctness", "prefix": PREFIX, "kind": "answer"}],
        "usage": {"calls": 200, "cache_hits": 0, "retries": 0, "failures": 0,
                  "input_tokens": 41000 + index, "output_tokens": 9000, "cost_usd": 0.0425},
    }
    if night.kind == "regression":
        p = 0.004 if night.outcome == "failed" else 0.41
        manifest["regression"] = {
            "outcome": night.outcome, "incomplete_reasons": manifest["incomplete_reasons"],
            "baseline_run_id": night.baseline_run_id,
            "gates": [
                {"metric": RATE, "tag": None, "rule": "max_drop 0.02",
                 "outcome": "breached" if night.outcome == "failed" else "held", "reason": "",
                 "baseline": round(night.candidate - night.delta, 4),
                 "candidate": night.candidate, "delta": night.delta, "low": None, "high": None,
                 "n_paired": 100, "p": p, "p_adjusted": min(1.0, 2 * p), "worst_slice": None},
                {"metric": SAFETY, "tag": "billing", "rule": "min 0.9", "outcome": "held",
                 "reason": "", "baseline": 0.97, "candidate": 0.97, "delta": 0.0, "low": None,
                 "high": None, "n_paired": 40, "p": 1.0, "p_adjusted": 1.0, "worst_slice": None},
            ],
            "pairwise_usage": {"calls": 200, "input_tokens": 50000, "output_tokens": 8000,
                               "cost_usd": 0.05},
            "canary": ({"sample": 20, "agreement": 0.95 if index % 4 else 0.85,
                        "drifted": index % 4 == 0} if index >= 10 else None),
        }
    return manifest, metrics


def planted(count: int) -> list[tuple[Night, dict, dict]]:
    """Each night with its manifest and metrics, oldest first."""
    return [(night, *night_manifest(i, night)) for i, night in enumerate(expected(count))]
