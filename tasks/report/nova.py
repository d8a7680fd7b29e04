"""A pairwise run's aggregates in the Amazon Nova rubric judge's own output structure.

Notebooks written for Nova read `nova_results.json` unchanged: the same three top-level keys,
the same task key and every Nova field (reference/004). judgeflow's names for the Nova block
are already Nova's (judges/result_names/'s NOVA_FIELDS), so this is a reshaping, not a
recomputation.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from judges.builtin.pairwise import PAIRWISE_JUDGE
from judges.result_names.pairwise import NOVA_FIELDS

__all__ = ["NOVA_TASK", "nova_job_id", "nova_results"]

NOVA_TASK = "custom|rubric_llm_judge_judge|0"


def nova_job_id(run_id: str) -> int:
    """Nova's integer job id, derived stably from the run id (Nova's field is an int)."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:12], 16)


def nova_results(metrics: dict, manifest: dict) -> dict:
    """`{config_general, results, versions}` as Nova writes them, from a compare run."""
    started = datetime.fromisoformat(manifest["started_at"]).timestamp()
    finished = datetime.fromisoformat(manifest["finished_at"]).timestamp()
    return {
        "config_general": {
            "lighteval_sha": f"judgeflow-{manifest.get('judgeflow_version', '')}",
            "num_fewshot_seeds": 1,
            "max_samples": None,
            "job_id": nova_job_id(manifest["run_id"]),
            "start_time": started,
            "end_time": finished,
            "total_evaluation_time_secondes": str(round(finished - started, 3)),
            "model_name": manifest["judge"]["model"],
            "model_sha": "",
            "model_dtype": None,
            "model_size": "",
        },
        "results": {NOVA_TASK: {name: _number(metrics.get(name)) for name in NOVA_FIELDS}},
        "versions": {NOVA_TASK: PAIRWISE_JUDGE.version},
    }


def _number(value: object) -> float | None:
    # Nova types every result as float; undefined values (no valid pass) stay null.
    return None if value is None else float(value)
