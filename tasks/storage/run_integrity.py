"""A published run vouches for its files; a later run that reads it back checks them.

Publishing (tasks/publish.py) records in the manifest's `integrity.files` the sha256 of every
file written before it and, with a signing key (judges/integrity.py), a MAC over the whole
manifest bound to the run's suite and run id (`integrity.mac`). The manifest is written last.

A run that reads an earlier one back (its regression baseline, its calibration source) checks
the manifest's MAC against the place it read it from, so a run copied to another run id or
suite is refused, then each file it uses against the digest, over the very bytes it parses:
nothing can be swapped between a check and a read. Without a key nothing is checked.
"""

from __future__ import annotations

import hashlib
import hmac

from judges.integrity import (
    RUN_MANIFEST,
    SigningKey,
    as_read_back,
    canonical,
    signing_fields,
)
from judges.storage import open_url
from tasks.storage.outputs import RunLocation

# How a run read back was taken: its MAC and digests checked, or read without a key.
VERIFIED, UNCHECKED, REFUSED = "verified", "unchecked", "refused"


class RunRefused(ValueError):
    """A run read back failed its integrity check; the message says what failed."""


def _binding(location: RunLocation) -> dict[str, str]:
    return {"suite": location.suite, "run_id": location.run_id}


def seal(manifest: dict, location: RunLocation, digests: dict[str, str],
         key: SigningKey | None) -> dict:
    """The manifest as published: file digests in `integrity.files`, and with a key its MAC.

    Returns:
        The manifest as plain JSON values (what a reader parses and re-checks).
    """
    integrity = {**signing_fields(key), **(manifest.get("integrity") or {}), "files": digests}
    sealed = as_read_back({**manifest, "integrity": integrity})
    if key is not None:
        sealed["integrity"]["mac"] = key.mac(RUN_MANIFEST, _binding(location), canonical(sealed))
    return sealed


def manifest_problem(manifest: dict, location: RunLocation, key: SigningKey) -> str | None:
    """Why the manifest read at `location` is refused, or None when its MAC verifies."""
    integrity = manifest.get("integrity")
    claimed = integrity.get("mac") if isinstance(integrity, dict) else None
    if claimed is None:
        return "its manifest.json carries no MAC (published without a signing key, or stripped)"
    unsigned = {**manifest, "integrity": {k: v for k, v in integrity.items() if k != "mac"}}
    if not key.verify(RUN_MANIFEST, _binding(location), canonical(unsigned), claimed):
        return ("its manifest.json fails the MAC check (altered, moved from another run, or "
                "signed with another key)")
    return None


class FileCheck:
    """One covered file's digest, fed the bytes as they are read.

    Args:
        manifest: the run's manifest, its MAC already verified.
        name: the file's name in the run folder.
    """

    def __init__(self, manifest: dict, name: str):
        self.name = name
        files = (manifest.get("integrity") or {}).get("files")
        self.expected = files.get(name) if isinstance(files, dict) else None
        self._hash = hashlib.sha256()

    def update(self, data: bytes) -> None:
        """Add bytes read from the file, in order."""
        self._hash.update(data)

    def check(self) -> None:
        """Once the whole file is read.

        Raises:
            RunRefused: the manifest records no digest of the file, or another one.
        """
        if not isinstance(self.expected, str):
            raise RunRefused(f"its signed manifest records no sha256 of {self.name}")
        if not hmac.compare_digest(self._hash.hexdigest().encode(),
                                   self.expected.encode("utf-8", "replace")):
            raise RunRefused(f"its {self.name} does not match the sha256 its signed manifest "
                             "records")


def read_covered(url: str, storage_options: dict | None, manifest: dict, name: str) -> bytes:
    """A file of a verified run, whole, once its digest matches the manifest's.

    Raises:
        FileNotFoundError: the file does not exist.
        RunRefused: its bytes are not those the manifest vouches for.
    """
    with open_url(url, "rb", storage_options) as handle:
        data = handle.read()
    check = FileCheck(manifest, name)
    check.update(data)
    check.check()
    return data
