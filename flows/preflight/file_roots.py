"""Every local file an untrusted run opens lies under the operator's roots, symlinks resolved.

guard_parameters (trust.py) checks the locations a parameter names; a folder it admits may
still hold a symlink leading out of every root (a run folder whose results.jsonl links to a
private file), and a run opens files inside it by name. So judges/storage.py, the one door to
fsspec, checks each local file it opens, lists, writes, moves or removes against the roots
given here: those of the operator's policy when the run's parameters are untrusted, none
otherwise. Installed when flows/preflight is imported, which every flow does.
"""

from __future__ import annotations

import os
from functools import lru_cache

from flows.preflight.trust import (
    READ_ROOTS_ENV,
    WRITE_ROOTS_ENV,
    OperatorPolicy,
    parameters_untrusted,
)
from judges.storage import LocalRoots, confine_local_files


def roots_of_this_run() -> LocalRoots | None:
    """The operator's local roots when this run's parameters are untrusted; None otherwise."""
    if not parameters_untrusted():
        return None
    return _local_roots(os.environ.get(READ_ROOTS_ENV, ""), os.environ.get(WRITE_ROOTS_ENV, ""))


@lru_cache(maxsize=8)
def _local_roots(read_setting: str, write_setting: str) -> LocalRoots:
    # Keyed on the settings the policy is read from: parsed once, not at every file.
    policy = OperatorPolicy.from_env()
    return LocalRoots(
        read=tuple(root.path for root in policy.read_roots if root.protocol == "file"),
        write=tuple(root.path for root in policy.write_roots if root.protocol == "file"),
        setting=f"{READ_ROOTS_ENV} and {WRITE_ROOTS_ENV}",
    )


def install() -> None:
    """Have judges/storage.py check every local file against this run's roots."""
    confine_local_files(roots_of_this_run)
