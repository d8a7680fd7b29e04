"""This process's batch broker: opened for a run in batch mode, closed when the run ends.

The model client (judges/model/llm.py) asks it for the running broker; the flows open and close it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from judges.model.batch.broker import BatchBroker, BatchOptions
from judges.model.batch.ledger import BatchLedger

_current: BatchBroker | None = None


def open_batches(options: BatchOptions | None, store: Any,
                 on_progress: Callable[[str], None] | None = None) -> BatchBroker | None:
    """Start this process's broker for a run in batch mode (None: online), with its ledger."""
    global _current
    close_batches()
    _current = (None if options is None
                else BatchBroker(options, BatchLedger(store), on_progress))
    return _current


def close_batches() -> None:
    """Stop the running broker, if any."""
    global _current
    if _current is not None:
        _current.close()
        _current = None


def current_batches() -> BatchBroker | None:
    """The running run's broker, if it judges through batches."""
    return _current
