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

This module sits in the lowest layer (judges/) so that the reply cache can use it too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem

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


def open_url(url: str, mode: str = "rb", storage_options: Mapping[str, Any] | None = None,
             **kwargs: Any) -> Any:
    """`fsspec.open` of a checked URL with checked options (an OpenFile, used with `with`)."""
    return fsspec.open(check_url(url), mode, **check_storage_options(storage_options), **kwargs)


def url_to_fs(url: str, storage_options: Mapping[str, Any] | None = None
              ) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and path of a checked URL, with checked options."""
    return fsspec.core.url_to_fs(check_url(url), **check_storage_options(storage_options))


def filesystem(protocol: str, storage_options: Mapping[str, Any] | None = None,
               **internal: Any) -> fsspec.AbstractFileSystem:
    """A filesystem of an allowed protocol; `internal` options are judgeflow's own, unchecked."""
    check_url(f"{protocol}://")
    return fsspec.filesystem(protocol, **check_storage_options(storage_options), **internal)


def is_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether the filesystem is an object store, where no directory needs creating."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol
    return not OBJECT_STORES.isdisjoint(protocols)


__all__ = ["ALLOWED_OPTIONS", "StorageRefused", "allowed_protocols", "check_storage_options",
           "check_url", "filesystem", "is_object_store", "local_path", "open_url", "protocol_of",
           "split_protocol", "url_to_fs"]
