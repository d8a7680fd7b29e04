"""How many post-deploy runs the relay may start: once per event, and so many per hour.

Anyone who can register a model version or set an alias makes the registry deliver an event,
and each relayed event starts a post-deploy-eval run (judge calls, paid). So, in a sliding
window (an hour by default):

- an event relayed already (the same kind, model, version and alias: its idempotency key) is
  answered as a duplicate and starts nothing, whatever its delivery id;
- at most `per_version` runs start for one model version (a version created, then an alias
  set on it, is two), and at most `total` in all;

beyond that, a delivery is answered 429 and starts nothing (MLflow retries it a few times,
which the window refuses alike). Everything held is bounded by `total`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from flows.relay.mapping import Candidate

DEFAULT_WINDOW_SECONDS = 3600.0
DEFAULT_TOTAL = 20
DEFAULT_PER_VERSION = 2
# The server's bounds (flows/relay/server.py), here to keep that module's uvicorn import lazy.
READ_TIMEOUT_SECONDS = 10.0  # a registry delivery is a few hundred bytes, sent at once
MAX_CONNECTIONS = 64

Admission = Literal["start", "duplicate", "too_many"]


@dataclass(frozen=True)
class RunLimits:
    """The operator's bounds (`judgeflow mlflow-relay --max-runs ...`)."""

    total: int = DEFAULT_TOTAL
    per_version: int = DEFAULT_PER_VERSION
    window_seconds: float = DEFAULT_WINDOW_SECONDS

    def __post_init__(self) -> None:
        if self.total < 1 or self.per_version < 1 or self.window_seconds <= 0:
            raise ValueError(f"run limits must be positive, not {self}")


def idempotency_key(candidate: Candidate) -> tuple[str, str, str, str]:
    """What makes two events the same run: the event, model, version and alias."""
    return candidate.event, candidate.name, candidate.version, candidate.alias or ""


class RunLedger:
    """The runs started within the window, by idempotency key, oldest first."""

    def __init__(self, limits: RunLimits):
        self.limits = limits
        self._started: OrderedDict[tuple[str, str, str, str], float] = OrderedDict()

    def admit(self, candidate: Candidate, now: float) -> Admission:
        """Whether `candidate`'s run may start now; "start" records it (see `release`)."""
        while self._started and next(iter(self._started.values())) <= now - \
                self.limits.window_seconds:
            self._started.popitem(last=False)
        key = idempotency_key(candidate)
        if key in self._started:
            return "duplicate"
        same_version = sum(1 for k in self._started if k[1:3] == key[1:3])
        if len(self._started) >= self.limits.total or same_version >= self.limits.per_version:
            return "too_many"
        self._started[key] = now
        return "start"

    def release(self, candidate: Candidate) -> None:
        """Forget a run that did not start (its event was not taken), so a retry may."""
        self._started.pop(idempotency_key(candidate), None)

    def why_not(self, candidate: Candidate) -> str:
        """The refusal, in words, for the 429 answer and the log."""
        return (f"too many post-deploy runs: at most {self.limits.per_version} per model "
                f"version and {self.limits.total} in all per "
                f"{self.limits.window_seconds:g} s (model {candidate.name!r} version "
                f"{candidate.version!r}); not started")
