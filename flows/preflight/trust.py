"""Who may choose what: a deployment run's parameters are untrusted.

The person who deploys judgeflow (the operator) is trusted: they set the worker's environment.
Whoever triggers a deployment run (the Prefect UI, the REST API, an event such as
`model.deployed`) is not, so in a deployment run every location and endpoint a parameter names
must be one the operator allowed in the worker's environment:

- `JUDGEFLOW_READ_ROOTS`: folders (and `s3://bucket/prefix`es) a run may read from, separated
  by commas; default: the judgeflow checkout. The write roots are readable too.
- `JUDGEFLOW_WRITE_ROOTS`: where a run may publish and keep its cache; default: the checkout's
  `results/`.
- `JUDGEFLOW_MODEL_ENDPOINTS`: the `api_base`s a run may call, each optionally paired with the
  one variable whose key it receives (`URL=NAME_API_KEY`; a URL ending in `*` is a prefix).
  Without `api_base`, a model is called at its provider's own endpoint with the provider's
  usual key, and a parameter may not pick another key variable.
- `JUDGEFLOW_STORAGE_ENDPOINTS`: the S3 `endpoint_url`s a parameter may name.
- `JUDGEFLOW_MLFLOW_TRACKING_URIS`: the MLflow tracking URIs (servers, local stores,
  `databricks`) a run may be logged to (its results leave for them) and read an `mlflow:`
  evaluation set from; default: none. A local store must also lie under the write roots.
- `JUDGEFLOW_MLFLOW_ARTIFACT_ROOTS`: where MLflow may keep a logged run's artifacts and read
  traces' spans from; default in a deployment run: `mlflow-artifacts:` only
  (tasks/mlflow/artifact_policy.py).
- `JUDGEFLOW_SUITES`, `JUDGEFLOW_BASELINE_SUITES`: suites a run may publish to beyond its
  deployment's, and suites whose baseline such a run may move (flows/preflight/suite_lock.py).

`JUDGEFLOW_UNTRUSTED_PARAMETERS=1` applies the same rules outside deployment runs (a service
that passes its callers' parameters to the flows). The command line on a user's own machine is
the user's, and keeps working as it does without these rules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel

from flows.preflight.ancestry import AncestryUnknown, nearest_deployment_id
from flows.preflight.jobs import check_job_variables
from flows.preflight.suite_lock import check_suite
from judges.errors import ConfigError
from judges.storage import is_local, local_path, protocol_of
from tasks.mlflow.stores import store_of

READ_ROOTS_ENV = "JUDGEFLOW_READ_ROOTS"
WRITE_ROOTS_ENV = "JUDGEFLOW_WRITE_ROOTS"
MODEL_ENDPOINTS_ENV = "JUDGEFLOW_MODEL_ENDPOINTS"
STORAGE_ENDPOINTS_ENV = "JUDGEFLOW_STORAGE_ENDPOINTS"
TRACKING_URIS_ENV = "JUDGEFLOW_MLFLOW_TRACKING_URIS"
UNTRUSTED_ENV = "JUDGEFLOW_UNTRUSTED_PARAMETERS"
CHECKOUT = Path(__file__).resolve().parents[2]

P = TypeVar("P", bound=BaseModel)


class ParameterRefused(ConfigError):
    """A run parameter the operator's policy does not allow; the message says which and why."""


def parameters_untrusted() -> bool:
    """Whether this flow run's parameters came from someone other than the operator.

    A subflow of a deployment run (the regression's re-judging of its baseline) is as
    untrusted as the run it serves: what it is given derives from that run's parameters or
    from files they named.
    """
    if os.environ.get(UNTRUSTED_ENV, "").strip().lower() in ("1", "true", "yes"):
        return True
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    flow_run = getattr(context, "flow_run", None)
    if getattr(flow_run, "deployment_id", None) is not None:
        return True
    return flow_run is not None and _deployment_ancestor(flow_run)


def _deployment_ancestor(flow_run: Any) -> bool:
    """Whether a flow run above this one is a deployment run (one that cannot be read counts)."""
    try:
        return nearest_deployment_id(flow_run) is not None
    except AncestryUnknown:  # an ancestor we cannot read may be a deployment run
        return True


def _entries(name: str) -> list[str]:
    return [part.strip() for part in os.environ.get(name, "").split(",") if part.strip()]


def _checkout() -> Path:
    """The judgeflow checkout the worker runs (its working directory when not a checkout)."""
    if (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "flows").is_dir():
        return CHECKOUT
    return Path.cwd().resolve()


@dataclass(frozen=True)
class Root:
    """A folder or remote prefix under which a run may read or write."""

    protocol: str
    path: str  # absolute, symlinks resolved (local) or bucket/prefix (remote), no trailing /

    @classmethod
    def parse(cls, text: str) -> Root:
        """A root from the operator's setting."""
        if is_local(text):
            return cls("file", local_path(text).rstrip("/") or "/")
        return cls(protocol_of(text), text.split("://", 1)[-1].strip("/"))

    def holds(self, protocol: str, path: str) -> bool:
        """Whether `path` (already normalised) lies at or under this root."""
        if protocol != self.protocol:
            return False
        if self.path in ("", "/"):  # a whole filesystem: "/" or every bucket ("s3://")
            return True
        return path == self.path or path.startswith(self.path + "/")

    def __str__(self) -> str:
        return self.path if self.protocol == "file" else f"{self.protocol}://{self.path}"


def plain_url_path(url: str) -> bool:
    """Whether the path of `url` has no '.' or '..' segment and no backslash.

    Decoded or percent-encoded (`%2e%2e`, `%5c`, `%252e`) alike: a server resolves them,
    climbing out of the prefix a `*` endpoint allows (`/teams/a/../b/` is `/teams/b/`).
    """
    try:
        path = urlsplit(url).path
    except ValueError:
        return False
    for _ in range(4):  # undo encodings of encodings; a path still changing after that is odd
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    else:
        return False
    return "\\" not in path and not any(part in (".", "..") for part in path.split("/"))


@dataclass(frozen=True)
class Endpoint:
    """A model endpoint the operator allows, and the key variable paired with it."""

    url: str
    key_env: str | None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """`URL` or `URL=NAME_API_KEY`."""
        url, separator, key = text.rpartition("=")
        if separator and key.endswith("_API_KEY") and "/" not in key:
            return cls(url.strip(), key.strip())
        return cls(text.strip(), None)

    def matches(self, api_base: str) -> bool:
        """Whether `api_base` is this endpoint (or lies under it, for a `*` prefix)."""
        if not plain_url_path(api_base):
            return False
        try:
            wanted, given = urlsplit(self.url.rstrip("*")), urlsplit(api_base)
            if (given.scheme, given.hostname, given.port) != (wanted.scheme, wanted.hostname,
                                                              wanted.port):
                return False
        except ValueError:  # a port that is not a number
            return False
        if given.scheme not in ("http", "https") or given.username or given.password:
            return False
        if self.url.endswith("*"):
            return given.path.startswith(wanted.path)
        return given.path.rstrip("/") == wanted.path.rstrip("/")


@dataclass(frozen=True)
class OperatorPolicy:
    """What the operator allows a deployment run's parameters to name."""

    read_roots: tuple[Root, ...]
    write_roots: tuple[Root, ...]
    endpoints: tuple[Endpoint, ...]
    storage_endpoints: tuple[str, ...]
    tracking_uris: tuple[str, ...] = ()

    @classmethod
    def from_env(cls) -> OperatorPolicy:
        """The policy set in the worker's environment, with its defaults."""
        checkout = _checkout()
        reads = _entries(READ_ROOTS_ENV) or [str(checkout)]
        writes = _entries(WRITE_ROOTS_ENV) or [str(checkout / "results")]
        write_roots = tuple(Root.parse(r) for r in writes)
        return cls(
            read_roots=tuple(Root.parse(r) for r in reads) + write_roots,
            write_roots=write_roots,
            endpoints=tuple(Endpoint.parse(e) for e in _entries(MODEL_ENDPOINTS_ENV)),
            storage_endpoints=tuple(e.rstrip("/") for e in _entries(STORAGE_ENDPOINTS_ENV)),
            tracking_uris=tuple(u.rstrip("/") for u in _entries(TRACKING_URIS_ENV)),
        )

    def check_tracking_uri(self, uri: str | None) -> None:
        """Refuse an MLflow tracking URI the operator did not list, or a local store elsewhere.

        A local store (sqlite file, file store folder) is written by MLflow directly, past
        judges/storage.py: even a listed one must lie under the write roots.
        """
        if not uri:
            return
        if uri.strip().rstrip("/") not in self.tracking_uris:
            raise ParameterRefused(
                f"parameter 'mlflow_tracking_uri' names {uri!r}, which is not among the MLflow "
                "tracking URIs this worker may log to or read sets from "
                f"({TRACKING_URIS_ENV}: {', '.join(self.tracking_uris) or 'none'}); ask the "
                "operator to add it")
        store = store_of(uri)
        if store.path is not None:
            self.check_location("mlflow_tracking_uri", os.path.abspath(store.path), "write")

    def check_location(self, field: str, url: str, access: str) -> None:
        """Refuse a location outside the roots for `access` ("read" or "write")."""
        roots, setting = ((self.write_roots, WRITE_ROOTS_ENV) if access == "write"
                          else (self.read_roots, READ_ROOTS_ENV))
        protocol = protocol_of(url)
        if is_local(url):
            protocol, path = "file", local_path(url)
        else:
            path = url.split("://", 1)[-1].strip("/")
            if any(part in ("", ".", "..") for part in path.split("/")) or "?" in url:
                raise ParameterRefused(
                    f"parameter {field!r} names {url!r}, which has an empty, '.' or '..' "
                    "segment or a query: give a plain s3://bucket/key URL"
                )
        if not any(root.holds(protocol, path) for root in roots):
            allowed = ", ".join(map(str, roots))
            raise ParameterRefused(
                f"parameter {field!r} names {url!r}, outside what a deployment run may {access} "
                f"({setting}: {allowed}); use a location under one of them, or ask the "
                f"operator to add it to {setting} in the deployment's job environment"
            )

    def check_storage_options(self, options: dict[str, Any]) -> None:
        """Refuse an S3 endpoint the operator did not list."""
        endpoints = [options.get("endpoint_url"),
                     (options.get("client_kwargs") or {}).get("endpoint_url")]
        for endpoint in filter(None, endpoints):
            if str(endpoint).rstrip("/") not in self.storage_endpoints:
                raise ParameterRefused(
                    f"storage option endpoint_url {endpoint!r} is not among the storage "
                    f"endpoints this worker may use ({STORAGE_ENDPOINTS_ENV}: "
                    f"{', '.join(self.storage_endpoints) or 'none'}); ask the operator to add it"
                )

    def paired_model(self, field: str, model: P) -> P:
        """The model settings with the key variable the operator paired with its endpoint."""
        api_base, key_env = getattr(model, "api_base", None), getattr(model, "api_key_env", None)
        if not api_base:
            if key_env:
                raise ParameterRefused(
                    f"parameter {field}.api_key_env {key_env!r} may not be chosen in a "
                    f"deployment run: without api_base the provider's usual key is used; an "
                    f"endpoint and its key are paired by the operator in {MODEL_ENDPOINTS_ENV}"
                )
            return model
        if not plain_url_path(api_base):
            raise ParameterRefused(
                f"parameter {field}.api_base {api_base!r} has a '.' or '..' segment or a "
                "backslash in its path (maybe percent-encoded): give the endpoint's plain URL"
            )
        endpoint = next((e for e in self.endpoints if e.matches(api_base)), None)
        if endpoint is None:
            listed = ", ".join(e.url for e in self.endpoints) or "none"
            raise ParameterRefused(
                f"parameter {field}.api_base {api_base!r} is not among the model endpoints "
                f"this worker may call ({MODEL_ENDPOINTS_ENV}: {listed}); ask the operator to "
                "add it"
            )
        if key_env and key_env != endpoint.key_env:
            raise ParameterRefused(
                f"parameter {field}.api_key_env {key_env!r} is not the key variable the "
                f"operator paired with {endpoint.url!r} ({endpoint.key_env or 'no key'}); "
                "leave api_key_env empty"
            )
        return model.model_copy(update={"api_key_env": endpoint.key_env})


def guard_parameters(params: P) -> P:
    """`params` as this run may use them: unchanged when the operator chose them.

    In a deployment run (or with JUDGEFLOW_UNTRUSTED_PARAMETERS=1), every location must lie
    under the operator's roots, every endpoint be one the operator listed, and a model's key
    variable is the one the operator paired with its endpoint.

    Raises:
        JobVariablesRefused: a deployment run created with job variables (flows/preflight/jobs.py).
        ParameterRefused: the first parameter the policy does not allow, before anything is
            read, written or called.
    """
    check_job_variables()
    if not parameters_untrusted():
        return params
    check_suite(params)  # the suite, output and baseline are the operator's
    policy = OperatorPolicy.from_env()
    for field, url, access in params.locations():
        policy.check_location(field, url, access)
    policy.check_storage_options(params.storage_options)
    policy.check_tracking_uri(getattr(params, "mlflow_tracking_uri", None))
    updates = {}
    for field in ("judge", "candidate"):
        model = getattr(params, field, None)
        if isinstance(model, BaseModel) and hasattr(model, "panel_members") and \
                len(members := model.panel_members()) > 1:
            # A panel: each member's endpoint and key under the same rule as a lone judge's.
            paired = [policy.paired_model(f"{field}.members[{member.model}]", member)
                      for member in members]
            updates[field] = policy.paired_model(field, model).with_members(paired)
        elif isinstance(model, BaseModel):
            updates[field] = policy.paired_model(field, model)
    return params.model_copy(update=updates)
