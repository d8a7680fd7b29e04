"""What kind of MLflow store a tracking URI names, and where it is; no MLflow import.

MLflow's client takes four kinds of tracking URI, and judgeflow takes every one of them:

- a tracking server, `http://` or `https://`;
- a database store, `sqlite:///mlflow.db` (SQLAlchemy's form: three slashes and a relative
  path, four and an absolute one) or another SQLAlchemy database (`postgresql://`, `mysql://`,
  `mssql://`, with or without `+driver`);
- a file store, `file:///abs/mlruns` or a plain path (`./mlruns`); MLflow 3 keeps it in
  maintenance and refuses it unless MLFLOW_ALLOW_FILE_STORE=true;
- a Databricks workspace, `databricks` (DATABRICKS_HOST and DATABRICKS_TOKEN, or the DEFAULT
  profile of ~/.databrickscfg) or `databricks://PROFILE` (that profile).

Anything else (a typo such as `htp://`, a plugin scheme) is refused in one sentence: MLflow
would fail later with a stack trace, or log somewhere nobody looks.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

Kind = Literal["server", "database", "files", "databricks"]
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
FORMS = ("http(s)://HOST:PORT, sqlite:///PATH.db (or another SQLAlchemy database URL), "
         "file:///PATH or a plain folder path, databricks or databricks://PROFILE")
CONFIG_FILE_ENV = "DATABRICKS_CONFIG_FILE"
DEFAULT_PROFILE = "DEFAULT"
ALLOW_FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"


class UnsupportedTrackingURI(ValueError):
    """A tracking URI of no kind MLflow's client takes; the message names the forms."""


@dataclass(frozen=True)
class Store:
    """A tracking URI's kind and, for a local store, the file or folder it keeps."""

    kind: Kind
    path: str | None = None  # the sqlite file or the file store's folder, as given
    profile: str | None = None  # a Databricks profile (None: the environment or DEFAULT)

    @property
    def local(self) -> bool:
        """Whether MLflow writes this store's files on this machine (no server in between)."""
        return self.path is not None


def store_of(uri: str) -> Store:
    """The store `uri` names.

    Raises:
        UnsupportedTrackingURI: `uri` is of no kind MLflow's client takes.
    """
    text = uri.strip()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    dialect = scheme.split("+", 1)[0]
    if scheme in ("http", "https"):
        if not parts.hostname:
            raise UnsupportedTrackingURI(f"MLflow tracking URI {uri!r} names no host; use {FORMS}")
        return Store("server")
    if text.lower() == "databricks" or scheme == "databricks":
        profile = (parts.netloc.split(":", 1)[0] or None) if scheme == "databricks" else None
        return Store("databricks", profile=profile)
    if dialect == "sqlite":
        # sqlite:///rel.db is "rel.db"; sqlite:////abs.db is "/abs.db"; sqlite:// is in memory
        path = text.split("://", 1)[1][1:] if text.count("/") >= 3 else ""
        if not path or path == ":memory:":
            raise UnsupportedTrackingURI(
                f"MLflow tracking URI {uri!r} is an in-memory database, gone when the run "
                f"ends; give a file, sqlite:///PATH.db")
        return Store("database", path=unquote(path.split("?", 1)[0]))
    if dialect in DATABASES:
        return Store("database")
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query:
            raise UnsupportedTrackingURI(
                f"MLflow tracking URI {uri!r} names another host or a query; a file store is "
                f"file:///PATH on this machine")
        return Store("files", path=unquote(parts.path))
    if not scheme or len(scheme) == 1:  # a plain path (a Windows drive letter too)
        return Store("files", path=text)
    raise UnsupportedTrackingURI(f"MLflow tracking URI {uri!r} is of no kind judgeflow logs to "
                                 f"(scheme {scheme!r}); use {FORMS}")


def databricks_credentials(profile: str | None) -> tuple[str, str] | None:
    """The Databricks workspace URL and token MLflow's client would use; None when not set.

    As the Databricks SDK does for a PAT: DATABRICKS_HOST and DATABRICKS_TOKEN without a
    profile, else the profile (DEFAULT without one) of ~/.databrickscfg (DATABRICKS_CONFIG_FILE).
    """
    host, token = os.environ.get("DATABRICKS_HOST"), os.environ.get("DATABRICKS_TOKEN")
    if profile is None and host and token:
        return _https(host), token
    config = configparser.ConfigParser()
    path = os.environ.get(CONFIG_FILE_ENV) or os.path.expanduser("~/.databrickscfg")
    try:
        config.read(path)
    except configparser.Error:
        return None
    name = profile or os.environ.get("DATABRICKS_CONFIG_PROFILE") or DEFAULT_PROFILE
    section = config[name] if config.has_section(name) or name == DEFAULT_PROFILE else {}
    host, token = section.get("host"), section.get("token")
    return (_https(host), token) if host and token else None


def databricks_config_file() -> str:
    """Where the Databricks profiles are read from (for messages)."""
    return os.environ.get(CONFIG_FILE_ENV) or "~/.databrickscfg"


def _https(host: str) -> str:
    host = host.strip().rstrip("/")
    return host if "://" in host else f"https://{host}"


def run_url(uri: str, experiment_id: str, run_id: str) -> str:
    """Where a person opens the MLflow run: the server's or workspace's page, or the store's.

    A local store has no page of its own: `mlflow ui --backend-store-uri URI` serves it, at
    the same `#/experiments/…/runs/…` address a server uses.
    """
    store = store_of(uri)
    if store.kind == "databricks":
        credentials = databricks_credentials(store.profile)
        host = credentials[0] if credentials else uri
        return f"{host}/ml/experiments/{experiment_id}/runs/{run_id}"
    if store.local:
        return f"{uri.rstrip('/')}#/experiments/{experiment_id}/runs/{run_id}"
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def file_store_refused() -> bool:
    """Whether the installed MLflow refuses a file store (3.x: unless MLFLOW_ALLOW_FILE_STORE).

    Imports mlflow (seconds): asked only of a run that logs to a file store.
    """
    from mlflow import environment_variables

    allow = getattr(environment_variables, ALLOW_FILE_STORE_ENV, None)
    return allow is not None and not allow.get()
