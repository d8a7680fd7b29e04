"""Which published run may become a suite's baseline, and what a run id read back may be.

A leaf module: the baseline reader (tasks/storage/baseline.py), publishing and the suite's
history all decide the same way, and the history can be read by the baseline reader without
an import cycle.
"""

from __future__ import annotations

import re

BASELINE_STATUSES = ("complete", "passed")
BASELINE_KINDS = ("evaluate", "regression")
# A run id read from the bucket becomes a path segment: the pattern of flows.params.SAFE_NAME
# (the flows' own check of names given as parameters; tests keep the two equal).
SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Set false in the manifest of a run whose untrusted parameters may not move the suite's
# baseline (flows/preflight/suite_lock.py); the manifest is signed, so it cannot be undone.
MAY_MOVE_BASELINE = "may_move_baseline"


def becomes_baseline(manifest: dict) -> bool:
    """Whether publishing this run moves the suite's baseline pointer to it.

    A complete evaluate run or a passed regression does; a re-judged run only when asked
    (`as_baseline`: adopting a new judge on purpose) and complete; never a run whose manifest
    says it may not (`may_move_baseline: false`).
    """
    if manifest.get(MAY_MOVE_BASELINE) is False:
        return False
    if manifest.get("kind") == "rejudge":
        return (manifest.get("status") == "complete"
                and bool((manifest.get("rejudge") or {}).get("as_baseline")))
    return (manifest.get("status") in BASELINE_STATUSES
            and manifest.get("kind", "evaluate") in BASELINE_KINDS)
