"""Writing a run's files under {output}/{suite}/{run_id}/ on any fsspec filesystem.

Order matters: data files first, manifest.json last (a run without one is incomplete), then
{suite}/latest.json. Each write is retried; if one still fails, the error says what was and
was not written.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import fsspec
import pandas as pd

WRITE_ATTEMPTS = 3


class PublishError(RuntimeError):
    """A file could not be written after retries; nothing after it was written."""


@dataclass
class RunLocation:
    output: str
    suite: str
    run_id: str
    storage_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fs, root = fsspec.core.url_to_fs(self.output, **self.storage_options)
        self.suite_dir = f"{root.rstrip('/')}/{self.suite}"
        self.run_dir = f"{self.suite_dir}/{self.run_id}"

    def url(self, name: str = "") -> str:
        path = f"{self.run_dir}/{name}" if name else self.run_dir
        return self.fs.unstrip_protocol(path)


def records_frame(records: Iterable[dict]) -> pd.DataFrame:
    """Records as a frame Parquet can hold: nested objects become JSON text."""
    frame = pd.DataFrame(list(records))
    for column in frame.columns:
        values = frame[column]
        if values.map(_needs_json).any():
            frame[column] = values.map(lambda v: None if v is None else json.dumps(v, default=str))
    return frame


def _needs_json(value) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, list) and any(isinstance(v, dict | list) for v in value)


class Publisher:
    """Writes files in order, retrying each, and remembers what is written."""

    def __init__(self, location: RunLocation):
        self.location = location
        self.written: list[str] = []

    def write(self, path: str, produce: Callable[[io.IOBase], None]) -> None:
        fs = self.location.fs
        last_error: Exception | None = None
        for attempt in range(WRITE_ATTEMPTS):
            try:
                fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                with fs.open(path, "wb") as handle:
                    produce(handle)
                self.written.append(fs.unstrip_protocol(path))
                return
            except Exception as error:  # noqa: BLE001 - any storage failure is retried
                last_error = error
                time.sleep(0.5 * 2**attempt)
        raise PublishError(
            f"could not write {fs.unstrip_protocol(path)} after {WRITE_ATTEMPTS} attempts "
            f"({type(last_error).__name__}: {last_error}); written before it: "
            f"{self.written or 'nothing'}; the run has no manifest.json and is incomplete"
        )

    def write_run_file(self, name: str, produce: Callable[[io.IOBase], None]) -> None:
        self.write(f"{self.location.run_dir}/{name}", produce)

    def write_json(self, path: str, value: dict) -> None:
        data = json.dumps(value, indent=2, ensure_ascii=False, default=str).encode()
        self.write(path, lambda handle: handle.write(data))
