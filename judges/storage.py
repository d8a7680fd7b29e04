"""The one door to fsspec: every URL a run opens, and every storage option, passes here first.

fsspec can reach far more than a folder or a bucket: `http://` (any internal address),
`memory://`, `reference://` (whose options name further files), and chains such as
`simplecache::http://...` whose options choose where a local copy is written. Anyone who can set
a run's parameters could use them to read private files or write code into the worker's
environment. So a URL is taken only with a protocol on a short allow-list and no chaining, and
storage options only from an allow-list of keys (endpoint, region, anonymous access, profile,
retries and timeouts), each of the expected type.

The operator (whoever sets the worker's environment, not whoever triggers a run) may allow more
protocols with `JUDGEFLOW_STORAGE_PROTOCOLS` (comma-separated, e.g. `gcs,az`).

In a run whose parameters are untrusted, every local file opened here (read, written, listed,
copied, moved or removed) must resolve, symlinks resolved, under the operator's roots: a
folder under a root may hold a symlink that leads out of it, and checking the folder a
parameter names is not enough. The flows layer says which roots hold for the current run
(`confine_local_files`); this module checks every local path against them.

This module sits in the lowest layer (judges/) so that the reply cache can use it too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.core import OpenFile, split_protocol
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import isfilelike

from judges.errors import ConfigError

PROTOCOLS_ENV = "JUDGEFLOW_STORAGE_PROTOCOLS"
DEFAULT_PROTOCOLS = frozenset({"file", "s3"})
# Filesystems whose "directories" are key prefixes and whose writes replace objects atomically.
# Nothing needs creating before a write there, and trying (fs.makedirs) would probe the bucket
# with HeadBucket / GetBucketLocation and even CreateBucket: calls a writer allowed only
# PutObject on its prefix may not make.
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "oss"})

_NUMBER = (int, float)
# Every storage option judgeflow passes on, with the type its value must have. Nothing here
# names a file, a cache location, another filesystem, a proxy or a credential.
ALLOWED_OPTIONS: dict[str, Any] = {
    "endpoint_url": str,
    "anon": bool,
    "profile": str,
    "requester_pays": bool,
    "use_ssl": bool,
    "skip_instance_cache": bool,
    "use_listings_cache": bool,
    "client_kwargs": {"endpoint_url": str, "region_name": str},
    "config_kwargs": {
        "connect_timeout": _NUMBER,
        "read_timeout": _NUMBER,
        "max_pool_connections": int,
        "retries": {"total_max_attempts": int, "max_attempts": int, "mode": str},
    },
}


class StorageRefused(ConfigError):
    """A URL or storage option that judgeflow will not hand to fsspec."""


def allowed_protocols() -> frozenset[str]:
    """File and s3, and whatever the operator added in JUDGEFLOW_STORAGE_PROTOCOLS."""
    extra = os.environ.get(PROTOCOLS_ENV, "")
    return DEFAULT_PROTOCOLS | {p.strip().lower() for p in extra.split(",") if p.strip()}


def protocol_of(url: str) -> str:
    """The URL's protocol; a plain path is "file"."""
    protocol, _ = split_protocol(url)
    return (protocol or "file").lower()


def is_local(url: str) -> bool:
    """Whether the URL names a file on this machine (a plain path, file:// or local://)."""
    return protocol_of(url) in ("file", "local")


def check_url(url: str) -> str:
    """The URL unchanged if judgeflow may open it; StorageRefused naming why not."""
    if not isinstance(url, str) or not url:
        raise StorageRefused(f"expected a path or URL, got {url!r}")
    if url.strip().lower().startswith("mlflow:"):
        raise StorageRefused(f"{url!r} names a set kept in MLflow: only the evaluation set "
                             "(data) can be read from MLflow; give a path or an s3:// URL")
    if "::" in url:
        raise StorageRefused(
            f"{url!r} chains filesystems ('::'); give a plain path or an s3:// URL"
        )
    protocol = protocol_of(url)
    allowed = allowed_protocols()
    if protocol not in allowed:
        raise StorageRefused(
            f"{url!r} uses the {protocol!r} protocol; judgeflow opens only "
            f"{', '.join(sorted(allowed))} (the operator can allow more with {PROTOCOLS_ENV})"
        )
    return url


def check_storage_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options as a dict if every key is allowed and of its type; StorageRefused if not."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise StorageRefused(f"storage options must be a mapping, got {options!r:.60}")
    _check_level(options, ALLOWED_OPTIONS, "")
    return dict(options)


def _check_level(options: Mapping[str, Any], allowed: dict[str, Any], path: str) -> None:
    for key, value in options.items():
        expected = allowed.get(key) if isinstance(key, str) else None
        name = f"{path}{key}"
        if expected is None:
            raise StorageRefused(
                f"storage option {name!r} is not accepted; judgeflow takes only "
                f"{', '.join(path + k for k in allowed)} (credentials come from the AWS chain: "
                "environment, profile or role)"
            )
        if isinstance(expected, dict):
            if not isinstance(value, Mapping):
                raise StorageRefused(f"storage option {name!r} must be a mapping")
            _check_level(value, expected, f"{name}.")
        elif not isinstance(value, expected) or (expected is not bool
                                                 and isinstance(value, bool)):
            raise StorageRefused(f"storage option {name!r} has the wrong type: {value!r:.60}")


def local_path(url: str) -> str:
    """The absolute path fsspec opens for a local URL (`~` expanded), symlinks resolved."""
    return os.path.realpath(LocalFileSystem._strip_protocol(url))


@dataclass(frozen=True)
class LocalRoots:
    """The local folders (absolute, symlinks resolved) a run may read from and write to."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    setting: str = "the operator's roots"  # where the operator sets them, for the message

    def check(self, path: str, access: str) -> None:
        """Refuse `path` unless it resolves under a root for `access` ("read" or "write")."""
        real = os.path.realpath(path)
        roots = self.write if access == "write" else self.read
        if not any(root == "/" or real == root or real.startswith(root + "/") for root in roots):
            # The target is not named: whoever planted the link learns nothing from the message.
            raise StorageRefused(
                f"{path!r} resolves (symlinks followed) to a place outside what this run may "
                f"{access} ({self.setting}); a file under a root may not link out of it: "
                "replace the symlink by the file itself, or ask the operator to add its folder"
            )


# Which roots hold for the run in progress (None: the caller is the operator, no limit); set
# by the flows layer, which knows who triggered the run.
_confinement: Callable[[], LocalRoots | None] | None = None


def confine_local_files(roots_of_this_run: Callable[[], LocalRoots | None]) -> None:
    """Have every local file opened here checked against the roots the callable gives."""
    global _confinement
    _confinement = roots_of_this_run


def check_local_file(path: str, access: str) -> None:
    """Refuse a local path outside the current run's roots (StorageRefused); else nothing."""
    roots = _confinement() if _confinement is not None else None
    if roots is not None:
        roots.check(path, access)


def _access(mode: str) -> str:
    return "write" if set(mode) & set("wax+") else "read"


class ConfinedLocalFileSystem(LocalFileSystem):
    """The local filesystem, with every path it opens or changes checked (check_local_file)."""

    def _open(self, path, mode="rb", block_size=None, **kwargs):
        check_local_file(self._strip_protocol(path), _access(mode))
        return super()._open(path, mode, block_size, **kwargs)

    def ls(self, path, detail=False, **kwargs):
        """List a folder under the roots."""
        check_local_file(self._strip_protocol(path), "read")
        return super().ls(path, detail, **kwargs)

    def cp_file(self, path1, path2, **kwargs):
        """Copy from under the read roots to under the write roots."""
        check_local_file(self._strip_protocol(path1), "read")
        check_local_file(self._strip_protocol(path2), "write")
        return super().cp_file(path1, path2, **kwargs)

    def get_file(self, path1, path2, callback=None, **kwargs):
        """Copy a file under the read roots to a local scratch path."""
        # path2 is judgeflow's own scratch copy, not a place a parameter chose.
        check_local_file(self._strip_protocol(path1), "read")
        if isfilelike(path2):
            return super().get_file(path1, path2, callback, **kwargs)
        return LocalFileSystem.cp_file(self, path1, path2, **kwargs)

    def put_file(self, path1, path2, callback=None, **kwargs):
        """Copy a local scratch file to under the write roots."""
        check_local_file(self._strip_protocol(path2), "write")
        return LocalFileSystem.cp_file(self, path1, path2, **kwargs)

    def mv(self, path1, path2, recursive: bool = True, **kwargs):
        """Move within the write roots."""
        check_local_file(self._strip_protocol(path1), "write")
        check_local_file(self._strip_protocol(path2), "write")
        return super().mv(path1, path2, recursive, **kwargs)

    def makedirs(self, path, exist_ok=False):
        """Create a folder under the write roots."""
        check_local_file(self._strip_protocol(path), "write")
        return super().makedirs(path, exist_ok)

    def rm_file(self, path):
        """Remove a file under the write roots."""
        check_local_file(self._strip_protocol(path), "write")
        return super().rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        """Remove files or folders under the write roots."""
        for one in path if isinstance(path, list) else [path]:
            check_local_file(self._strip_protocol(one), "write")
        return super().rm(path, recursive, maxdepth)


def _confined(fs: fsspec.AbstractFileSystem) -> fsspec.AbstractFileSystem:
    if type(fs) is LocalFileSystem:
        return ConfinedLocalFileSystem(**fs.storage_options)
    return fs


def open_url(url: str, mode: str = "rb", storage_options: Mapping[str, Any] | None = None,
             **kwargs: Any) -> Any:
    """`fsspec.open` of a checked URL with checked options (an OpenFile, used with `with`)."""
    if is_local(check_url(url)):
        fs, path = url_to_fs(url, storage_options)
        return OpenFile(fs, path, mode, **kwargs)
    return fsspec.open(check_url(url), mode, **check_storage_options(storage_options), **kwargs)


def url_to_fs(url: str, storage_options: Mapping[str, Any] | None = None
              ) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and path of a checked URL, with checked options."""
    fs, path = fsspec.core.url_to_fs(check_url(url), **check_storage_options(storage_options))
    return _confined(fs), path


def filesystem(protocol: str, storage_options: Mapping[str, Any] | None = None,
               **internal: Any) -> fsspec.AbstractFileSystem:
    """A filesystem of an allowed protocol; `internal` options are judgeflow's own, unchecked."""
    check_url(f"{protocol}://")
    return _confined(fsspec.filesystem(protocol, **check_storage_options(storage_options),
                                       **internal))


def is_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether the filesystem is an object store, where no directory needs creating."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol
    return not OBJECT_STORES.isdisjoint(protocols)


__all__ = ["ALLOWED_OPTIONS", "ConfinedLocalFileSystem", "LocalRoots", "StorageRefused",
           "allowed_protocols", "check_local_file", "check_storage_options", "check_url",
           "confine_local_files", "filesystem", "is_object_store", "local_path", "open_url",
           "protocol_of", "split_protocol", "url_to_fs"]
