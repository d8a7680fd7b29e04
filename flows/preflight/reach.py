"""Whether a model's own endpoint (--api-base) answers at all, asked in about a second.

Without this, a judge server that is not running costs the whole retry budget of every call
(five attempts with backoff, about thirty seconds) before the run ends incomplete. One TCP
connection settles it: refused, unresolvable or silent means no call can succeed. Only the
connection is opened, nothing is sent, so no key or prompt leaves the machine. Models without
an api_base (cloud providers) are not probed: their reachability is the provider's, and tests
run without a network.
"""

from __future__ import annotations

import socket
import urllib.request
from urllib.parse import urlsplit

from judges.errors import ConfigError

# Long enough for a loaded loopback or LAN server to accept, short enough to answer in a second.
CONNECT_TIMEOUT_SECONDS = 1.5
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UnreachableModel(ConfigError):
    """A model's api_base refuses, does not resolve or does not answer: no call could succeed."""


def check_reachable(model: str, api_base: str | None, option: str) -> None:
    """Open (and close) one TCP connection to the api_base's host and port.

    Args:
        model: the litellm model string, named in the message.
        api_base: the endpoint; None means a provider's own endpoint, which is not probed.
        option: the command-line option that sets this endpoint, named in the fix.

    Raises:
        UnreachableModel: naming the model, the URL, what happened and how to fix it.
    """
    if not api_base:
        return
    address = _host_and_port(api_base)
    if address is None:
        raise UnreachableModel(
            f"the endpoint {api_base!r} of model {model} is not an http(s) URL with a host: "
            f"fix {option} (e.g. http://127.0.0.1:8000/v1)")
    if _through_proxy(api_base, address[0]):
        return  # the proxy, not this machine, connects to the host: a direct probe proves nothing
    try:
        socket.create_connection(address, timeout=CONNECT_TIMEOUT_SECONDS).close()
    except OSError as error:
        raise UnreachableModel(
            f"model {model} is unreachable at {api_base} ({_what_happened(error, address)}): "
            f"start its server there, or fix {option}") from None


def _host_and_port(api_base: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(api_base)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a port that is not a number or out of range
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or port is None:
        return None
    return parts.hostname, port


def _through_proxy(api_base: str, host: str) -> bool:
    scheme = urlsplit(api_base).scheme
    return scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(host)


def _what_happened(error: OSError, address: tuple[str, int]) -> str:
    host, port = address
    if isinstance(error, socket.gaierror):
        return f"the host name {host!r} does not resolve"
    if isinstance(error, TimeoutError):
        return f"no answer from {host}:{port} within {CONNECT_TIMEOUT_SECONDS:g} s"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused: nothing listens on {host}:{port}"
    return f"cannot connect to {host}:{port}: {error.strerror or error}"
