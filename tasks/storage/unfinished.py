"""Runs of a suite that started and never published: what the next night says about them.

A night whose machine died and that nobody re-ran (no automation installed, no worker left)
leaves nothing behind a reader of the suite would see: its flow run may still say Running, and
the history simply has no line for it. So a regression run writes a small marker when it starts
judging, `{output}/{suite}/started/{run_id}.json`, and removes it once it has published. A
marker whose run has no `manifest.json` is a run that never finished (crashed, killed, or
still running); the next run of the suite names it in its console, its summary, its manifest
and its line of the history page.

The bucket is untrusted: only a marker's file name is read (a safe run id), never its content,
and at most MAX_LISTED are named. Writing or removing a marker is best effort: a store that
refuses it costs the notice, never the run.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from tasks.storage.baseline_rules import SAFE_RUN_ID
from tasks.storage.outputs import RunLocation

STARTED_DIR = "started"
MARKER_SUFFIX = ".json"
MAX_LISTED = 10

logger = logging.getLogger(__name__)


def _marker(location: RunLocation, run_id: str) -> str:
    return f"{location.suite_dir}/{STARTED_DIR}/{run_id}{MARKER_SUFFIX}"


def mark_started(location: RunLocation, kind: str, started_at: datetime) -> None:
    """Say, in the suite's folder, that this run started (removed when it has published)."""
    body = {"run_id": location.run_id, "kind": kind, "started_at": started_at.isoformat()}
    try:
        location.fs.makedirs(f"{location.suite_dir}/{STARTED_DIR}", exist_ok=True)
        location.fs.pipe_file(_marker(location, location.run_id), json.dumps(body).encode())
    except Exception as error:  # noqa: BLE001 - the marker serves the next night, not this one
        logger.debug("could not mark run %s started: %s", location.run_id, error)


def mark_finished(location: RunLocation) -> None:
    """Remove this run's marker: it published."""
    try:
        location.fs.rm_file(_marker(location, location.run_id))
    except Exception as error:  # noqa: BLE001 - a marker left beside a manifest is ignored
        logger.debug("could not clear run %s's marker: %s", location.run_id, error)


def unfinished_runs(location: RunLocation) -> list[str]:
    """Run ids of the suite's runs that started and never published, newest first.

    This run's own marker (an earlier attempt of the same run) is not counted: this attempt
    is finishing it.
    """
    folder = f"{location.suite_dir}/{STARTED_DIR}"
    try:
        names = location.fs.ls(folder, detail=False)
    except FileNotFoundError:
        return []
    except Exception as error:  # noqa: BLE001 - the notice is lost, not the run
        logger.debug("could not list %s: %s", folder, error)
        return []
    run_ids = sorted({name.rsplit("/", 1)[-1].removesuffix(MARKER_SUFFIX) for name in names
                      if name.endswith(MARKER_SUFFIX)}, reverse=True)
    found = []
    for run_id in run_ids:
        if run_id == location.run_id or not SAFE_RUN_ID.fullmatch(run_id) or ".." in run_id:
            continue
        try:
            published = location.fs.exists(f"{location.suite_dir}/{run_id}/manifest.json")
        except Exception:  # noqa: BLE001 - unknown is not "never finished"
            continue
        if not published:
            found.append(run_id)
        if len(found) == MAX_LISTED:
            break
    return found
