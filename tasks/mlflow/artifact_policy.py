"""Where MLflow may keep a run's files, and where the tracking credentials may go; no MLflow import.

An MLflow run's artifacts go where its experiment's `artifact_location` says, and whoever
creates the experiment chooses it (anyone who can reach the tracking server, even before
judgeflow first logs a suite). MLflow's client writes there, and reads traces' spans from
there, with the worker's own access: a local folder, a bucket with the worker's cloud
credentials, an http(s) server with the tracking credentials (MLflow's HttpArtifactRepository
sends MLFLOW_TRACKING_TOKEN, or _USERNAME and _PASSWORD, to whatever host the location names).
So before a run logs or reads artifacts, each location is checked:

- it must lie under one of the artifact roots (`JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS`, separated by
  commas: `mlflow-artifacts:`, the tracking server's own proxied store; a folder; a bucket
  prefix; an http(s) prefix). Without the setting, a run with untrusted parameters (a
  deployment run) accepts `mlflow-artifacts:` only, and a user's own command line any
  location, as MLflow does;
- whatever the roots, a location that MLflow reaches over http(s) on another host than the
  tracking server's is refused while tracking credentials are configured: they would go there.

Roots and locations are compared as URLs of any scheme, so that a tracking URI that is not an
http server (a database, a folder) needs nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from judges.errors import ConfigError

ARTIFACT_ROOTS_ENV = "JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS"
PROXIED = "mlflow-artifacts:"  # the default of a deployment run: through the tracking server
_CREDENTIAL_ENVS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_AUTH",
                    "MLFLOW_TRACKING_AWS_SIGV4", "MLFLOW_TRACKING_CLIENT_CERT_PATH")
_CREDENTIALS_FILE = "~/.mlflow/credentials"  # MLflow reads a username and password from it
_HTTP = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class ArtifactLocationRefused(ConfigError):
    """An artifact location outside the artifact roots, or one the credentials would reach."""


class _Unplain(ValueError):
    """A location with a query, a fragment, credentials or a '.'/'..' segment."""


@dataclass(frozen=True)
class _Place:
    """A location or root as compared: scheme, host (or bucket) and a normalised path."""

    scheme: str
    netloc: str
    path: str

    def holds(self, other: _Place) -> bool:
        if (self.scheme, self.netloc) != (other.scheme, other.netloc):
            return False
        return self.path in ("", "/") or other.path == self.path \
            or other.path.startswith(self.path + "/")


def _origin(uri: str) -> tuple[str, str, int | None]:
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port


def _place(uri: str, tracking_uri: str) -> _Place:
    """`uri` as compared; an `mlflow-artifacts:` URI naming the tracking server's host as none."""
    text = uri.strip()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a path (a Windows drive letter too)
        if scheme == "file" and (parts.netloc not in ("", "localhost") or parts.query):
            raise _Unplain(uri)
        path = parts.path if scheme == "file" else text
        return _Place("file", "", os.path.realpath(os.path.expanduser(path)))
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise _Unplain(uri)
    segments = parts.path.rstrip("/").split("/")
    if any(s in (".", "..") for s in segments) or "" in segments[1:]:
        raise _Unplain(uri)
    netloc = parts.netloc.lower()
    if scheme == "mlflow-artifacts" and netloc:
        # MLflow resolves a host-less mlflow-artifacts URI against the tracking server.
        tracked = _origin(tracking_uri)
        netloc = "" if _origin(f"{tracked[0] or 'http'}://{netloc}") == tracked else netloc
    return _Place(scheme, netloc, parts.path.rstrip("/"))


def credentials_configured() -> bool:
    """Whether MLflow would send tracking credentials with its requests."""
    return any(os.environ.get(name) for name in _CREDENTIAL_ENVS) or os.path.isfile(
        os.path.expanduser(_CREDENTIALS_FILE))


def reaches_other_host(uri: str, tracking_uri: str) -> bool:
    """Whether MLflow would send an http request for `uri` to another host than the tracker's."""
    scheme = urlsplit(uri.strip()).scheme.lower()
    if scheme in _HTTP:
        return _origin(uri) != _origin(tracking_uri)
    if scheme == "mlflow-artifacts":
        try:
            return _place(uri, tracking_uri).netloc != ""
        except _Unplain:
            return True
    return False


@dataclass(frozen=True)
class ArtifactPolicy:
    """The artifact locations a run may write to and read from.

    Attributes:
        roots: the allowed locations, None for any (a user's own command line).
        setting: where the roots come from, for messages.
    """

    roots: tuple[str, ...] | None
    setting: str = ARTIFACT_ROOTS_ENV

    @classmethod
    def from_env(cls, untrusted: bool) -> ArtifactPolicy:
        """The operator's roots; without them, `mlflow-artifacts:` only when `untrusted`."""
        listed = [p.strip() for p in os.environ.get(ARTIFACT_ROOTS_ENV, "").split(",")
                  if p.strip()]
        if listed:
            return cls(tuple(listed))
        if untrusted:
            return cls((PROXIED,), f"{ARTIFACT_ROOTS_ENV} unset, in a deployment run")
        return cls(None)

    def check(self, uri: str | None, owner: str, tracking_uri: str, outcome: str) -> None:
        """Refuse `uri` (the artifact location of `owner`) unless this policy allows it.

        Args:
            uri: the experiment's artifact location, the run's artifact URI, a trace's.
            owner: what keeps its artifacts there, e.g. "the MLflow experiment 'rag'".
            tracking_uri: the tracking server the run talks to.
            outcome: what the refusal means, e.g. "nothing was logged to MLflow".

        Raises:
            ArtifactLocationRefused: one sentence: where, why, and how to fix it.
        """
        where = f"{owner} keeps its artifacts at {uri!r}"
        if not uri:
            raise ArtifactLocationRefused(f"{where}, which names no location; {outcome}")
        if credentials_configured() and reaches_other_host(uri, tracking_uri):
            raise ArtifactLocationRefused(
                f"{where}, another host than the tracking server {tracking_uri!r}, and MLflow "
                "would send it the tracking credentials (MLFLOW_TRACKING_TOKEN or "
                f"MLFLOW_TRACKING_USERNAME/PASSWORD); {outcome}: use an experiment whose "
                f"artifacts the tracking server serves ({PROXIED}/...)")
        if self.roots is None:
            return
        try:
            place = _place(uri, tracking_uri)
        except _Unplain:
            raise ArtifactLocationRefused(
                f"{where}, which has a query, a fragment, credentials or an empty, '.' or '..' "
                f"segment; {outcome}: use an experiment with a plain artifact location") from None
        if not any(_root(r, tracking_uri).holds(place) for r in self.roots):
            raise ArtifactLocationRefused(
                f"{where}, outside the artifact locations this worker may use "
                f"({self.setting}: {', '.join(self.roots)}); {outcome}: use an experiment whose "
                f"artifact location is under one of them, or ask the operator to add it to "
                f"{ARTIFACT_ROOTS_ENV}")


def _root(text: str, tracking_uri: str) -> _Place:
    try:
        return _place(text, tracking_uri)
    except _Unplain:
        return _Place("", "", "\0")  # an unplain root allows nothing
