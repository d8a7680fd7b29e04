"""The baseline of a suite: which published run it is, and reading it back.

`{output}/{suite}/latest.json` points at the newest run of a suite, whatever its outcome, for
browsing. `{output}/{suite}/baseline.json` points at the newest run that *passed*: an evaluate
run whose status is "complete", or a regression run whose status is "passed". Publishing
writes it after the manifest, and only for such runs, so a failed or incomplete run never
becomes the default baseline (a regression that failed twice fails twice).

Whoever can write the suite's folder is not trusted to decide the gates. The pointer's run id
must be a single safe path segment. With a signing key (judges/integrity.py) the baseline's
manifest MAC, bound to its suite and run id, and the digests of the files read from it
(metrics.json here, results.jsonl in `iter_baseline_records`) must verify, and a run the
pointer names must have passed by its signed manifest; otherwise the baseline is *refused*: the
run cannot be compared, so its regression ends incomplete, saying why.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple

from judges.errors import ConfigError
from judges.integrity import SigningKey, signing_key
from judges.storage import open_url
from tasks.storage.baseline_rules import SAFE_RUN_ID, becomes_baseline
from tasks.storage.history import newest_baseline
from tasks.storage.outputs import RunLocation
from tasks.storage.run_integrity import (
    REFUSED,
    UNCHECKED,
    VERIFIED,
    FileCheck,
    RunRefused,
    manifest_problem,
    read_covered,
)
from tasks.storage.signed_records import POINTER, check, pointer_binding

BASELINE_POINTER = "baseline.json"


class BaselineNotFound(ConfigError):
    """A baseline run named explicitly does not exist or has no manifest (is incomplete)."""


class BaselineRefused(RunRefused):
    """The baseline failed its integrity check; the message names the run and what failed."""


class BaselineRun(NamedTuple):
    """A published run used as the baseline: where it is, what it recorded, how it was checked.

    `check` is "verified" (MAC and digests checked), "unchecked" (no signing key: trusted as
    found) or "refused"; a refused baseline carries no manifest or metrics, only `refused`,
    the sentence saying why. `pointer` says how `baseline.json` was taken when it named the
    run: "verified" (its MAC, and no newer baseline in the suite's signed history) or
    "unchecked" (no key); None for a run named explicitly.
    """

    run_id: str
    url: str
    manifest: dict
    metrics: dict
    check: str = UNCHECKED
    refused: str | None = None
    pointer: str | None = None


def pointer_path(location: RunLocation) -> str:
    """Where the suite's baseline pointer lives: {output}/{suite}/baseline.json."""
    return f"{location.suite_dir}/{BASELINE_POINTER}"


def read_json(url: str, storage_options: dict | None = None) -> dict | None:
    """A JSON file, or None when it does not exist."""
    try:
        with open_url(url, "r", storage_options) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def _refused(run_id: str, url: str, why: str, pointer: str | None = None) -> BaselineRun:
    return BaselineRun(run_id, url, {}, {}, REFUSED, f"baseline run {run_id!r} refused: {why}",
                       pointer)


def _pointer_problem(pointer: dict, suite: str, run_id: str, key: SigningKey) -> str | None:
    """Why a signed suite's baseline.json is not the one its last baseline run wrote."""
    how = check(POINTER, pointer_binding(suite, BASELINE_POINTER, run_id), pointer, key)
    if how == VERIFIED:
        return None
    return (f"{suite}/{BASELINE_POINTER} names it, and the pointer "
            + ("carries no MAC" if how == "unsigned" else "fails its MAC check")
            + " (not written by a run published under this signing key, or altered); publish a"
            " new baseline run of the suite, or name the baseline run explicitly")


def _rolled_back(run: RunLocation, manifest: dict, pointer: dict) -> str | None:
    """Why the run a verified pointer names is not the suite's newest baseline, or None.

    The pointer carries the named run's `published_at`, which must be its signed manifest's
    (an old pointer replayed names an old run at its old time), and no verified history entry
    of the suite may name a baseline published later.
    """
    published = manifest.get("published_at")
    if pointer.get("published_at") != published:
        return (f"{run.suite}/{BASELINE_POINTER} says it was published at "
                f"{pointer.get('published_at')!r}, its signed manifest {published!r}")
    newest = newest_baseline(run)
    if (newest is not None and newest.run_id != run.run_id
            and (newest.published_at or "") > str(published or "")):
        return (f"{run.suite}/{BASELINE_POINTER} names it (published {published}), but the "
                f"suite's signed history names a newer baseline, {newest.run_id!r} (published "
                f"{newest.published_at}): the pointer was rolled back or moved; to compare with "
                "an older run on purpose, name it as the baseline")
    return None


def _verified(run: RunLocation, manifest: dict, pointer: dict | None, options: dict,
              key: SigningKey) -> BaselineRun:
    """The baseline with a key: its MAC, passing and recency (if the pointer named it), metrics."""
    from_pointer = pointer is not None
    problem = manifest_problem(manifest, run, key)
    if problem is None and from_pointer and not becomes_baseline(manifest):
        problem = (f"baseline.json names it, but its signed manifest says a {manifest.get('kind')}"
                   f" run with status {manifest.get('status')!r}, which never becomes a baseline")
    if problem is None and pointer is not None:
        problem = _rolled_back(run, manifest, pointer)
    if problem is not None:
        return _refused(run.run_id, run.url(), problem, VERIFIED if from_pointer else None)
    try:
        metrics = json.loads(read_covered(run.url("metrics.json"), options, manifest,
                                          "metrics.json"))
    except FileNotFoundError:
        return _refused(run.run_id, run.url(), "its metrics.json is missing")
    except RunRefused as error:
        return _refused(run.run_id, run.url(), str(error))
    return BaselineRun(run.run_id, run.url(), manifest, metrics, VERIFIED,
                       pointer=VERIFIED if from_pointer else None)


def find_baseline(
    output: str, suite: str, run_id: str | None, storage_options: dict | None = None
) -> BaselineRun | None:
    """The run to compare with: `run_id` if given, else the suite's baseline pointer.

    Returns:
        None when no run id is given and the suite has no baseline yet (its first run); a
        refused baseline (see the module docstring) when the pointer's run id is not a safe
        path segment or, with a signing key, the run fails its integrity check.

    Raises:
        BaselineNotFound: the named run (or the one the pointer names) has no manifest.
    """
    options = storage_options or {}
    key = signing_key()
    pointer = None
    if run_id is None:
        suite_dir = RunLocation(output, suite, "baseline", options)
        pointer_url = suite_dir.fs.unstrip_protocol(pointer_path(suite_dir))
        pointer = read_json(pointer_url, options)
        if pointer is None:
            return None
        run_id = str(pointer.get("run_id") if isinstance(pointer, dict) else None)
        if not SAFE_RUN_ID.match(run_id) or ".." in run_id:
            return _refused(run_id, pointer_url, f"{suite}/{BASELINE_POINTER} names it, and it "
                            "is not a single safe path segment")
        if key is not None and (problem := _pointer_problem(pointer, suite, run_id, key)):
            return _refused(run_id, pointer_url, problem, "refused")
    run = RunLocation(output, suite, run_id, options)
    manifest = read_json(run.url("manifest.json"), options)
    if manifest is None:
        raise BaselineNotFound(
            f"baseline run {run_id!r} of suite {suite!r} has no manifest.json at {run.url()}: "
            "it does not exist or its publishing never finished"
        )
    if key is not None:
        return _verified(run, manifest, pointer, options, key)
    return BaselineRun(run_id, run.url(), manifest, read_json(run.url("metrics.json"), options)
                       or {}, pointer=None if pointer is None else UNCHECKED)


def iter_baseline_records(baseline: BaselineRun, storage_options: dict | None = None
                          ) -> Iterator[dict[str, Any]]:
    """The baseline's published records, streamed from its results.jsonl.

    A verified baseline's file is hashed as it is read; when it ends, a digest other than the
    one its signed manifest records raises, so a caller that uses what it collected only once
    the iteration is over never uses an altered file.

    Raises:
        FileNotFoundError: the run has no results.jsonl.
        BaselineRefused: a verified baseline's results.jsonl is not the one it published.
    """
    url = f"{baseline.url}/results.jsonl"
    check = FileCheck(baseline.manifest, "results.jsonl") if baseline.check == VERIFIED else None
    with open_url(url, "rb", storage_options) as handle:
        for raw in handle:
            if check is not None:
                check.update(raw)
            line = raw.decode("utf-8")
            if line.strip():
                yield json.loads(line)
    if check is not None:
        try:
            check.check()
        except RunRefused as error:
            raise BaselineRefused(f"baseline run {baseline.run_id!r} refused: {error}") from None
