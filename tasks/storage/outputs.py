"""Writing a run's files under {output}/{suite}/{run_id}/ on any fsspec filesystem.

Order matters: data files first, manifest.json last (a run without one is incomplete), then
{suite}/latest.json. Each file is produced once into a local scratch file and then uploaded,
the upload retried; if one still fails, the error says what was and was not written.

Each file appears whole or not at all: on object stores (S3, GCS, Azure) a PUT, or a completed
multipart upload, is atomic; elsewhere the file is written under a temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO

from judges.storage import is_object_store, url_to_fs

WRITE_ATTEMPTS = 3
WRITE_BACKOFF_SECONDS = 0.5
# Failures that another attempt a second later will not cure.
PERMANENT_ERRORS = (PermissionError, FileNotFoundError, NotADirectoryError)
# suite and run_id become one path segment each: no separators, nothing that climbs.
UNSAFE_SEGMENT = re.compile(r"[/\\\x00]|^\.{0,2}$")


class PublishError(RuntimeError):
    """A file could not be written after retries; nothing after it was written."""


def check_segment(value: str, what: str) -> str:
    r"""Refuse a suite or run id that is not exactly one path segment under the output.

    The flows validate names more strictly (flows.params.SAFE_NAME); this is the writer's
    own guard, so that no caller can make it write outside the output prefix.

    Raises:
        ValueError: `value` is empty, '.', '..', or contains '/', '\' or NUL.
    """
    if not isinstance(value, str) or UNSAFE_SEGMENT.search(value):
        raise ValueError(f"{what} {value!r} must be a single path segment (no '/', '\\', '..')")
    return value


@dataclass
class RunLocation:
    """Where one run goes: {output}/{suite}/{run_id}/ on the filesystem of `output`."""

    output: str
    suite: str
    run_id: str
    storage_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_segment(self.suite, "suite")
        check_segment(self.run_id, "run_id")
        self.fs, root = url_to_fs(self.output, self.storage_options)
        self.suite_dir = f"{root.rstrip('/')}/{self.suite}"
        self.run_dir = f"{self.suite_dir}/{self.run_id}"
        self.latest_path = f"{self.suite_dir}/latest.json"

    def url(self, name: str = "") -> str:
        """The URL of a file in the run's directory, or of the directory itself."""
        path = f"{self.run_dir}/{name}" if name else self.run_dir
        return self.fs.unstrip_protocol(path)


def _sha256_of(local: str) -> str:
    digest = hashlib.sha256()
    with open(local, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Publisher:
    """Writes files in order, retrying each upload, and remembers what is written.

    Args:
        location: The run's location.
        planned: Optionally, every path the caller will write, in order; a failure then
            names each planned file not written. Without it, the failed file, manifest.json
            and latest.json are named.
    """

    def __init__(self, location: RunLocation, planned: Sequence[str] | None = None):
        self.location = location
        self.planned = list(planned) if planned is not None else None
        self.written: list[str] = []
        self.digests: dict[str, str] = {}  # sha256 (hex) of each file written, by path

    def write(self, path: str, produce: Callable[[IO[bytes]], None]) -> None:
        """Produce a file once, then upload it to `path`, retrying the upload.

        Raises:
            PublishError: `produce` failed, or every upload attempt did.
        """
        url = self.location.fs.unstrip_protocol(path)
        # The scratch file keeps the name's suffix, so stores that guess a content type from
        # it serve report.html as text/html rather than as a download.
        with tempfile.TemporaryDirectory(prefix="judgeflow-publish-") as scratch:
            local = os.path.join(scratch, "file" + PurePosixPath(path).suffix)
            try:
                with open(local, "wb") as handle:
                    produce(handle)
            except Exception as error:
                raise PublishError(self._failure(url, f"could not produce {url}", error)) from error
            digest = _sha256_of(local)  # of the bytes uploaded: the manifest vouches for them
            last_error: Exception | None = None
            for attempt in range(WRITE_ATTEMPTS):
                if attempt:
                    time.sleep(WRITE_BACKOFF_SECONDS * 2 ** (attempt - 1))
                try:
                    self._upload(local, path)
                except PERMANENT_ERRORS as error:
                    last_error = error
                    break
                except Exception as error:  # noqa: BLE001 - any other storage failure is retried
                    last_error = error
                else:
                    self.written.append(url)
                    self.digests[path] = digest
                    return
        raise PublishError(
            self._failure(url, f"could not write {url} after {attempt + 1} attempt(s)", last_error)
        ) from last_error

    def write_run_file(self, name: str, produce: Callable[[IO[bytes]], None]) -> None:
        """Write a file into the run's directory (see `write`)."""
        self.write(f"{self.location.run_dir}/{name}", produce)

    def write_json(self, path: str, value: dict) -> None:
        """Write `value` as indented UTF-8 JSON (see `write`)."""
        data = json.dumps(value, indent=2, ensure_ascii=False, default=str).encode()
        self.write(path, lambda handle: handle.write(data))

    def _upload(self, local: str, path: str) -> None:
        fs = self.location.fs
        if is_object_store(fs):
            fs.put_file(local, path)  # one PUT or multipart upload: whole or nothing
            return
        parent, name = path.rsplit("/", 1)
        fs.makedirs(parent, exist_ok=True)
        partial = f"{parent}/.{name}.{secrets.token_hex(4)}.partial"
        try:
            fs.put_file(local, partial)
            fs.mv(partial, path)  # a rename: a reader sees the old file or the new one
        except Exception:
            with contextlib.suppress(Exception):
                fs.rm_file(partial)
            raise

    def _failure(self, url: str, what: str, error: Exception | None) -> str:
        fs = self.location.fs
        manifest = self.location.url("manifest.json")
        latest = fs.unstrip_protocol(self.location.latest_path)
        if self.planned is not None:
            planned = [fs.unstrip_protocol(p) for p in self.planned]
            later = planned[planned.index(url) + 1:] if url in planned else planned
        else:
            later = [manifest, latest]
        not_written = [url, *(u for u in later if u != url and u not in self.written)]
        if manifest in self.written:
            state = "manifest.json was written, so the run is complete, but latest.json does " \
                    "not point at it"
        else:
            state = "the run has no manifest.json and is incomplete"
        return (
            f"{what} ({type(error).__name__}: {error}). Written: "
            f"{', '.join(self.written) or 'nothing'}. Not written: {', '.join(not_written)}. "
            f"{state}."
        )
