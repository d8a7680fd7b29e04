"""`judgeflow install-automations`: the automation that re-runs a night whose process died.

When a worker's flow run process is killed (OOM, a deploy restarting the worker, the machine
going down), nobody is left to run the flow's own `retries`: the worker (or Prefect's zombie
detection) reports the flow run Crashed. This automation answers `prefect.flow-run.Crashed` of
a flow run tagged `resume-on-crash` (the nightly and post-deploy deployments in
deployments/prefect.yaml) by setting that same flow run back to Scheduled ("AwaitingRetry"),
as the UI's Retry button does. The same flow run keeps its run id (flows/run/common.py
`flow_run_run_id`), so the new attempt resumes from the chunks the dead one stored and
publishes once.

Bounded by the flow run's run count, which the Crashed event carries as the label
`prefect.run-count`: only crashes of a run's first `max_retries` attempts that got to run are
retried. After that the flow run stays Crashed, unpublished (fail closed), and its last
`prefect.flow-run.Crashed` event is the one to alert on. A run that crashes before it ever
started (run count 0: its code or checkout is broken) is not retried.

A machine that dies takes the worker with the flow run, and nobody reports the crash. For that
case a second automation marks a tagged run whose heartbeats stopped (flows/run/heartbeat.py:
every deployment run sends them) as Crashed, `heartbeat_window` seconds after the last one;
the first automation then re-runs it as above.

Installing is idempotent: each automation is found by its name and updated in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from flows.commands.common import configured_server, fail

AUTOMATION_NAME = "judgeflow: re-run a crashed night"
RESUME_TAG = "resume-on-crash"
DEFAULT_MAX_RETRIES = 2
MAX_RETRIES_CAP = 20
DEFAULT_DELAY_SECONDS = 60
MIN_DELAY_SECONDS = 10  # Prefect's least `within` for a proactive trigger
CRASHED_EVENT = "prefect.flow-run.Crashed"
ZOMBIE_AUTOMATION_NAME = "judgeflow: mark a night whose heartbeats stopped as crashed"
HEARTBEAT_EVENT = "prefect.flow-run.heartbeat"
# Three missed heartbeats at the default 30 s (flows/run/heartbeat.py): a busy machine may
# send one late, not three.
DEFAULT_HEARTBEAT_WINDOW_SECONDS = 90
# What ends the wait for the next heartbeat: the next one, or the run reaching an end.
ALIVE_OR_DONE_EVENTS = frozenset({HEARTBEAT_EVENT} | {
    f"prefect.flow-run.{state}" for state in ("Completed", "Failed", "Cancelled", "Crashed")})
# Any of these after the crash means someone (the UI's Retry, a person) already moved the run.
MOVED_ON_EVENTS = frozenset(f"prefect.flow-run.{state}" for state in (
    "Scheduled", "AwaitingRetry", "Pending", "Running", "Cancelling", "Cancelled", "Completed",
    "Failed"))


def crash_retry_automation(max_retries: int = DEFAULT_MAX_RETRIES, tag: str = RESUME_TAG,
                           delay_seconds: int = DEFAULT_DELAY_SECONDS):
    """The automation's spec: Crashed (run count 1..max_retries) → AwaitingRetry, same run.

    Proactive: `delay_seconds` after the crash, unless the run moved on meanwhile (the UI's
    Retry, a cancel). The worker that reported the crash holds the run's slot until it has run
    the flow's on_crashed hooks, in a subprocess that imports the flow (~20 s on two busy
    cores); handed the same flow run before then, a Prefect 3.8 worker stops ("this borrower
    is already holding one of this CapacityLimiter's tokens").
    """
    from prefect.events.actions import ChangeFlowRunState
    from prefect.states import StateType

    if not 1 <= max_retries <= MAX_RETRIES_CAP:
        raise ValueError(f"max_retries must be 1 to {MAX_RETRIES_CAP}, not {max_retries!r}")
    if delay_seconds < MIN_DELAY_SECONDS:
        raise ValueError(f"delay_seconds must be at least {MIN_DELAY_SECONDS}, not "
                         f"{delay_seconds!r}")
    return _tagged_run_automation(
        AUTOMATION_NAME,
        f"A flow run tagged {tag!r} whose process died is scheduled again, as the same flow "
        f"run (same run id: it resumes from its stored chunks), {delay_seconds} s after the "
        f"crash, at most {max_retries} time(s); then it stays Crashed.",
        tag, Watch(CRASHED_EVENT, MOVED_ON_EVENTS, delay_seconds,
                   {"prefect.run-count": [str(n) for n in range(1, max_retries + 1)]}),
        action=ChangeFlowRunState(
            state=StateType.SCHEDULED, name="AwaitingRetry",
            message=f"Crashed; re-run by the automation {AUTOMATION_NAME!r} to resume its "
                    "stored chunks"))


@dataclass(frozen=True)
class Watch:
    """What a proactive automation waits for.

    `after`, then none of `expect` within `within_seconds`, on events that also `match`.
    """

    after: str
    expect: frozenset[str]
    within_seconds: int
    match: dict = field(default_factory=dict)


def _tagged_run_automation(name: str, description: str, tag: str, watch: Watch,
                           action: Any) -> Any:
    """A proactive automation per flow run tagged `tag`, taking `action` when `watch` fires."""
    from datetime import timedelta

    from prefect.automations import AutomationCore
    from prefect.events.schemas.automations import EventTrigger, Posture

    return AutomationCore(
        name=name, description=f"{description} Installed by `judgeflow install-automations`.",
        enabled=True,
        trigger=EventTrigger(
            after={watch.after}, expect=set(watch.expect),
            for_each={"prefect.resource.id"},  # one flow run at a time
            match={"prefect.resource.id": "prefect.flow-run.*", **watch.match},
            match_related={"prefect.resource.role": "tag",
                           "prefect.resource.id": f"prefect.tag.{tag}"},
            posture=Posture.Proactive, threshold=1,
            within=timedelta(seconds=watch.within_seconds)),
        actions=[action])


def zombie_automation(tag: str = RESUME_TAG,
                      window_seconds: int = DEFAULT_HEARTBEAT_WINDOW_SECONDS):
    """The automation's spec: a tagged run silent for `window_seconds` after a heartbeat → Crashed.

    Proactive, per flow run: each heartbeat opens a window that the next heartbeat (or the
    run's end) closes; a window that closes on nothing means the run's process is gone with
    its machine. The Crashed state this sets carries the run count, so the crash automation's
    bound on re-runs holds for machine deaths too.
    """
    if window_seconds < MIN_DELAY_SECONDS:
        raise ValueError(f"the heartbeat window must be at least {MIN_DELAY_SECONDS} s, not "
                         f"{window_seconds!r}")
    from prefect.events.actions import ChangeFlowRunState
    from prefect.states import StateType

    mark_crashed = ChangeFlowRunState(
        state=StateType.CRASHED,
        message=f"No heartbeat for {window_seconds} s: the flow run's machine stopped (marked "
                f"by the automation {ZOMBIE_AUTOMATION_NAME!r})")
    what = (f"A flow run tagged {tag!r} that sent no heartbeat for {window_seconds} s (its "
            f"machine died with its worker) is marked Crashed, so that the automation "
            f"{AUTOMATION_NAME!r} re-runs it.")
    watch = Watch(HEARTBEAT_EVENT, ALIVE_OR_DONE_EVENTS, window_seconds)
    return _tagged_run_automation(ZOMBIE_AUTOMATION_NAME, what, tag, watch, mark_crashed)


async def install_automation(spec: Any) -> tuple[str, Any]:
    """Create the automation, or update the one of the same name; ("created"|"updated", id)."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        found = await client.read_automations_by_name(spec.name)
        if not found:
            return "created", await client.create_automation(spec)
        for extra in found[1:]:  # an earlier, racing install: keep one
            await client.delete_automation(extra.id)
        await client.update_automation(found[0].id, spec)
        return "updated", found[0].id


def install_automations_command(
    max_retries: Annotated[int, typer.Option(
        help="Re-runs of one crashed flow run at most (attempts that got to run)")
    ] = DEFAULT_MAX_RETRIES,
    tag: Annotated[str, typer.Option(
        help="Flow runs with this tag are re-run when they crash")] = RESUME_TAG,
    delay: Annotated[int, typer.Option(
        help="Seconds after the crash (at least 10; Prefect checks every 5 s)")
    ] = DEFAULT_DELAY_SECONDS,
    heartbeat_window: Annotated[int, typer.Option(
        help="Seconds without a heartbeat after which a tagged run counts as crashed with its "
             "machine (at least 10; runs send one every JUDGEFLOW_HEARTBEAT_SECONDS, 30 s)")
    ] = DEFAULT_HEARTBEAT_WINDOW_SECONDS,
) -> None:
    """Install (or update) the automations that re-run a night whose process or machine died."""
    import asyncio

    server = configured_server("the automations belong on the server your workers use")
    try:
        specs = [crash_retry_automation(max_retries, tag, delay),
                 zombie_automation(tag, heartbeat_window)]
    except ValueError as error:
        fail(str(error))
    said = [f"a crashed flow run tagged {tag!r} is re-run {delay} s after it crashed, at most "
            f"{max_retries} time(s)",
            f"a flow run tagged {tag!r} silent for {heartbeat_window} s is marked crashed"]
    for spec, what in zip(specs, said, strict=True):
        try:
            outcome, automation_id = asyncio.run(install_automation(spec))
        except Exception as error:  # noqa: BLE001 - one sentence instead of a traceback
            fail(f"could not install the automation {spec.name!r} on {server!r}: "
                 f"{type(error).__name__}: {error}")
        print(f"{outcome} automation {spec.name!r} ({automation_id}): {what}")
