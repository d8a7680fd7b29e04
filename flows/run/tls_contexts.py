"""One TLS context per CA bundle for Prefect's API clients, instead of one per client.

Prefect builds a new SSL context, reading the whole CA bundle, for every API client it opens:
about ten per flow run, each tens of ms of CPU, even for an http:// API that never uses TLS. In
issue 27's profile that was a third of a warm shard's start-up. Prefect's client modules are
given an `ssl` whose `create_default_context` returns one context per set of arguments. Within
a process Prefect configures every such context the same way (from its TLS settings), so
sharing them changes what is spent, not what is verified.
"""

from __future__ import annotations

import functools
import importlib
import ssl
import types

PREFECT_TLS_MODULES = ("prefect.client.orchestration", "prefect._internal.version_checking",
                       "prefect._internal.websockets")


@functools.lru_cache(maxsize=8)
def _context(purpose: ssl.Purpose, cafile: str | None, capath: str | None,
             cadata: str | bytes | None) -> ssl.SSLContext:
    return ssl.create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)


def _shared_default_context(purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH, *,
                            cafile: str | None = None, capath: str | None = None,
                            cadata: str | bytes | None = None) -> ssl.SSLContext:
    return _context(purpose, cafile, capath, cadata)


def share_prefect_tls_contexts() -> None:
    """Make Prefect's API clients in this process share their TLS contexts (idempotent)."""
    shared = types.SimpleNamespace(**{name: getattr(ssl, name) for name in dir(ssl)
                                      if not name.startswith("__")})
    shared.create_default_context = _shared_default_context
    for name in PREFECT_TLS_MODULES:
        importlib.import_module(name).ssl = shared
