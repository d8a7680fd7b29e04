"""Flow run heartbeats for every deployment run, whatever worker started it.

A machine that dies (preempted, out of memory, its container lost) takes the worker with the
flow run: nobody is left to report the crash, and the run stays Running for ever. Prefect's
answer is a heartbeat event from the flow run and an automation that marks a run Crashed when
its heartbeats stop (`judgeflow install-automations` installs it, flows/commands/automations.py);
the crash automation then runs the night again as the same run.

Prefect's own heartbeats come every `PREFECT_FLOWS_HEARTBEAT_FREQUENCY` seconds: 180 by default
in Prefect 3.8, twice the automation's 90 s window, so a healthy night would be taken for dead.
judgeflow's locked pools cannot set that variable from a job variable and an operator on the
quick path does not set it. So a deployment run sends them itself, the same event Prefect
sends, every `JUDGEFLOW_HEARTBEAT_SECONDS` (default 30) from a thread of its own, while the
flow's body runs; only when Prefect already sends them at least that often does it send
none. Runs outside a deployment (the command line, a subflow) have a process that reports
its own end.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TypeVar

HEARTBEAT_EVENT = "prefect.flow-run.heartbeat"
INTERVAL_ENV = "JUDGEFLOW_HEARTBEAT_SECONDS"
DEFAULT_INTERVAL_SECONDS = 30
MIN_INTERVAL_SECONDS = 1

P = ParamSpec("P")
R = TypeVar("R")


def heartbeat_seconds() -> int:
    """The operator's interval (worker environment); the default when unset or not a number."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    try:
        return max(int(raw), MIN_INTERVAL_SECONDS) if raw else DEFAULT_INTERVAL_SECONDS
    except ValueError:
        return DEFAULT_INTERVAL_SECONDS


def prefect_sends_them_often_enough() -> bool:
    """Whether Prefect's own heartbeats come at least as often as ours.

    The automation's window is sized for ours; Prefect's default (180 s) is too seldom.
    """
    from prefect.settings import get_current_settings

    frequency = get_current_settings().flows.heartbeat_frequency
    return frequency is not None and frequency <= heartbeat_seconds()


def _deployment_run() -> tuple[Any, str] | None:
    """This deployment run and its flow's name; None outside one."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    flow_run = getattr(context, "flow_run", None)
    if getattr(flow_run, "deployment_id", None) is None:
        return None
    return flow_run, getattr(getattr(context, "flow", None), "name", "")


def _event_shape(flow_run: Any, flow_name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The resource and related resources of Prefect's own heartbeat.

    The automation matches the flow run's id and its tags.
    """
    resource = {"prefect.resource.id": f"prefect.flow-run.{flow_run.id}",
                "prefect.resource.name": flow_run.name or ""}
    related = [{"prefect.resource.id": f"prefect.flow.{flow_run.flow_id}",
                "prefect.resource.role": "flow", "prefect.resource.name": flow_name},
               {"prefect.resource.id": f"prefect.deployment.{flow_run.deployment_id}",
                "prefect.resource.role": "deployment"}]
    related += [{"prefect.resource.id": f"prefect.tag.{tag}", "prefect.resource.role": "tag"}
                for tag in sorted(flow_run.tags or [])]
    return resource, related


@contextlib.contextmanager
def heartbeats() -> Iterator[bool]:
    """Send heartbeats while the block runs, in a deployment run Prefect sends none for.

    Yields whether this block sends them. The first goes out at once (it opens the
    automation's window); the last one before the body ends at most one interval earlier.
    """
    found = _deployment_run()
    if found is None or prefect_sends_them_often_enough():
        yield False
        return
    from prefect.events import emit_event

    resource, related = _event_shape(*found)
    interval, stop = heartbeat_seconds(), threading.Event()

    def beat() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # a lost heartbeat is not the run's failure
                emit_event(event=HEARTBEAT_EVENT, resource=resource, related=related)
            stop.wait(interval)

    # The thread sees this run's settings (its API URL), as Prefect's own heartbeat does.
    thread = threading.Thread(target=contextvars.copy_context().run, args=(beat,),
                              name="judgeflow-heartbeat", daemon=True)
    thread.start()
    try:
        yield True
    finally:
        stop.set()  # no heartbeat after the body: one after the final state would read as alive


def sends_heartbeats(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """An async flow body that sends heartbeats in a deployment run (put under `@flow`)."""

    @functools.wraps(fn)
    async def body(*args: P.args, **kwargs: P.kwargs) -> R:
        with heartbeats():
            return await fn(*args, **kwargs)

    # Prefect resolves a flow's annotations in its function's module, which is this one for
    # `body`: give it the flow's signature with the names already resolved.
    body.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return body
