"""A night that survives its worker: a killed nightly flow run runs again, resumes, publishes once.

On a real Prefect server (tests/e2e/test_deployments.py's fixtures: `prefect server start`, whose
triggers service runs automations, and `prefect deploy --all`), with one process worker and the
automation installed as a user would (`judgeflow install-automations`). A flow run of the
nightly deployment is created as its schedule creates one, with no run id; its process is
killed with SIGKILL once some chunks are stored. The loopback judge counts what it is asked:
a call made twice shows there.

Slow (a server, a deploy, a worker, two attempts of a flow run: about a minute and a half on
two busy cores); marked `shards` with the other worker tests (`-m "not shards"` leaves it out).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prefect.client.schemas.objects import FlowRun

from flows.commands.automations import (
    AUTOMATION_NAME,
    RESUME_TAG,
    ZOMBIE_AUTOMATION_NAME,
    crash_retry_automation,
    zombie_automation,
)
from flows.run.common import flow_run_run_id, new_run_id
from tests.e2e import test_deployments
from tests.e2e.test_deployments import BIN, Server, _tail, _wait_for
from tests.e2e.test_shards import _flow_run_pid, process_workers
from tests.fake_llm import Reply, prompt_text

server = test_deployments.server
deployed = test_deployments.deployed
JUDGEFLOW = BIN / "judgeflow"
ROWS = 24
CHUNK_SIZE = 3  # 8 chunks
KILL_AFTER_CHUNKS = 3
SUITE = "night"
# Longer than the worker takes to let go of the killed run (it first runs the flow's on_crashed
# hooks in a subprocess that imports the flow: ~20 s here); see flows/commands/automations.py.
DELAY = "40"


# ---- the run id of a flow run given none (no server) -----------------------------------------

def _flow_run(expected: datetime | None, created: datetime, run_id: uuid.UUID | None = None
              ) -> FlowRun:
    return FlowRun(id=run_id or uuid.uuid4(), flow_id=uuid.uuid4(), name="night",
                   expected_start_time=expected, created=created)


def test_a_flow_run_s_run_id_is_stable_and_sorts_by_its_night():
    created = datetime(2026, 11, 20, 1, 0, 0, 123456, tzinfo=UTC)  # the scheduler's one pass
    nights = [_flow_run(datetime(2026, 11, 21 + n, 2, 0, tzinfo=UTC), created) for n in range(3)]
    ids = [flow_run_run_id(run) for run in nights]
    assert ids[0] == f"20261121T020000Z-{nights[0].id.hex[:4]}"
    assert sorted(reversed(ids)) == ids  # by night, though created in the same second
    # Every attempt of a flow run has the same id: the same run, read again after a retry.
    again = _flow_run(nights[1].expected_start_time, created + timedelta(days=2), nights[1].id)
    assert flow_run_run_id(again) == ids[1]
    # Two flow runs of the same slot (a manual run next to the scheduled one) do not collide.
    twin = _flow_run(nights[1].expected_start_time, created,
                     uuid.UUID(int=nights[1].id.int ^ (1 << 127)))  # another first hex digit
    assert flow_run_run_id(twin) != ids[1]
    # Without an expected start time (not yet scheduled): its creation time.
    assert flow_run_run_id(_flow_run(None, created)).startswith("20261120T010000Z-")
    # The shape of a command-line run id: they sort together.
    assert len(new_run_id(created)) == len(ids[0]) and new_run_id(created) < ids[0]


def test_the_automation_retries_a_bounded_number_of_crashes_of_tagged_runs():
    spec = crash_retry_automation(max_retries=3)
    trigger = spec.trigger
    assert trigger.after == {"prefect.flow-run.Crashed"}
    assert "prefect.flow-run.Crashed" not in trigger.expect  # a crash is not a move on
    assert trigger.posture == "Proactive" and trigger.for_each == {"prefect.resource.id"}
    assert trigger.match.root["prefect.run-count"] == ["1", "2", "3"]
    assert trigger.match_related.root["prefect.resource.id"] == f"prefect.tag.{RESUME_TAG}"
    [action] = spec.actions
    assert action.type == "change-flow-run-state"
    assert (action.state.value, action.name) == ("SCHEDULED", "AwaitingRetry")
    with pytest.raises(ValueError, match="max_retries"):
        crash_retry_automation(max_retries=0)
    with pytest.raises(ValueError, match="delay_seconds"):
        crash_retry_automation(delay_seconds=5)


def test_installing_without_a_server_says_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "home")
    done = subprocess.run([str(JUDGEFLOW), "install-automations"], env=env, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 2 and "PREFECT_API_URL" in done.stderr, done.stderr
    env["PREFECT_API_URL"] = "http://127.0.0.1:9/api"  # nothing listens there
    done = subprocess.run([str(JUDGEFLOW), "install-automations"], env=env, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 2 and "could not install" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# ---- on a Prefect server with a worker ----------------------------------------------------------

def _rows_file(folder: Path) -> Path:
    path = folder / "night.jsonl"
    path.write_text("".join(json.dumps({
        "request_id": f"n{i:03d}", "request": f"What is night item {i}?",
        "response": f"Night item {i} is number {i}.", "expected_response": f"number {i}",
    }) + "\n" for i in range(ROWS)))
    return path


class NightJudge:
    """The loopback judge's script: a verdict per prompt, slow, counting what it answered.

    Before the kill it holds new requests (`hold`) until the calls in progress are answered,
    so that no call is half-made when the process dies: a request held then is answered 503
    after the kill (never a verdict, never paid) and asked again by the next attempt.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.answered: Counter[str] = Counter()
        self.in_progress = 0
        self.holding, self.released = threading.Event(), threading.Event()

    def __call__(self, body: dict) -> Reply:
        text = prompt_text(body)
        with self.lock:
            held = self.holding.is_set()
            self.in_progress += 0 if held else 1
        if held:
            self.released.wait(60)
            return Reply(status=503, content="held while the process was killed")
        time.sleep(0.3)
        digest = int(hashlib.sha256(text.encode()).hexdigest(), 16)
        with self.lock:
            self.in_progress -= 1
            self.answered[text] += 1
        return Reply(content=json.dumps({"rationale": f"because {digest % 97}",
                                         "rating": "no" if digest % 5 == 0 else "yes"}))

    def quiet(self) -> bool:
        with self.lock:
            return self.in_progress == 0


class FlowRunKiller(threading.Thread):
    """SIGKILLs the flow run's process once, when `chunks` of its chunks are stored."""

    def __init__(self, flow_run_id: str, suite_dir: Path, chunks: int, judge: NightJudge):
        super().__init__(daemon=True)
        self.flow_run_id, self.suite_dir, self.chunks = flow_run_id, suite_dir, chunks
        self.judge = judge
        self.killed_pid: int | None = None
        self.stored_at_kill: list[Path] = []
        self.stop = threading.Event()

    def _stored(self) -> list[Path]:
        return sorted(self.suite_dir.glob("*/.chunks/judge/*.json"))

    def run(self) -> None:
        pid = None
        try:
            while self.killed_pid is None and not self.stop.wait(0.05):
                pid = pid or _flow_run_pid(self.flow_run_id)
                if pid is not None and len(self._stored()) >= self.chunks:
                    self._kill(pid)
        finally:
            self.judge.holding.clear()
            self.judge.released.set()

    def _kill(self, pid: int) -> None:
        self.judge.holding.set()
        while not self.judge.quiet() and not self.stop.wait(0.02):
            pass
        time.sleep(0.2)  # a chunk whose last call was just answered: let it be stored, or not
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended first: the test fails on killed_pid
            self.stop.set()
            return
        self.killed_pid = pid
        self.stored_at_kill = self._stored()


def _states(server: Server, flow_run_id: str) -> list[tuple[str, str]]:
    found = server.call("GET", f"/flow_run_states/?flow_run_id={flow_run_id}")
    ordered = sorted(found.raise_for_status().json(), key=lambda s: s["timestamp"])
    return [(s["type"], s["name"]) for s in ordered]


def _install(server: Server) -> str:
    done = server.run(JUDGEFLOW, "install-automations", "--max-retries", "2", "--delay", DELAY)
    return done.stdout


def _scheduled_night(server: Server, deployed: dict, fake_llm, tmp_path: Path
                     ) -> tuple[NightJudge, Path, dict]:
    """A nightly flow run as the scheduler makes one (no run id), judged by a counting judge."""
    judge = NightJudge()
    fake_llm.reset(judge)
    out = tmp_path / "out"
    params = {**deployed["nightly"]["parameters"]["params"],
              "data": str(_rows_file(tmp_path)), "output": str(out), "suite": SUITE,
              "judge": {"model": "openai/night-judge", "api_base": fake_llm.api_base,
                        "concurrency": 2},
              "judges": ["safety"], "chunk_size": CHUNK_SIZE,
              "gates": None, "pairwise": False, "canary_rows": 0}
    assert "run_id" not in params
    created = server.call("POST", f"/deployments/{deployed['nightly']['id']}/create_flow_run",
                          json={"parameters": {"params": params}})
    flow_run = created.raise_for_status().json()
    assert RESUME_TAG in flow_run["tags"]
    return judge, out, flow_run


def test_a_killed_night_is_run_again_as_the_same_run_and_published_once(
        server, deployed, fake_llm, tmp_path):
    # Installed as the README says; installing again updates it, never a second one.
    assert "created automation" in _install(server)
    assert "updated automation" in _install(server)
    with server.client() as api:
        found = api.post("/automations/filter", json={}).raise_for_status().json()
    assert [a["name"] for a in found].count(AUTOMATION_NAME) == 1

    judge, out, flow_run = _scheduled_night(server, deployed, fake_llm, tmp_path)

    killer = FlowRunKiller(flow_run["id"], out / SUITE, KILL_AFTER_CHUNKS, judge)
    killer.start()
    worker_log = server.home / "night-worker.log"
    try:
        with process_workers(server, ("night-worker",), server.env):
            def finished() -> dict | None:
                now = server.call("GET", f"/flow_runs/{flow_run['id']}").raise_for_status().json()
                return now if now["state"]["type"] in ("COMPLETED", "FAILED") else None

            final = _wait_for(finished, 240, f"the night's end\n{_tail(worker_log)}"
                              f"\n{_tail(server.log)}", every=1)
    finally:
        killer.stop.set()
        killer.join()

    assert killer.killed_pid is not None, _tail(worker_log)
    assert final["state"]["type"] == "COMPLETED", (final["state"], _tail(worker_log, 6000))
    # The same flow run, crashed, re-scheduled by the automation, run a second time.
    assert final["run_count"] == 2
    states = _states(server, flow_run["id"])
    crashed = states.index(("CRASHED", "Crashed"))
    assert states[crashed + 1] == ("SCHEDULED", "AwaitingRetry"), states
    assert states[-1][0] == "COMPLETED"

    # One run folder, named after the flow run: the second attempt found the first's chunks.
    run_id = flow_run_run_id(FlowRun.model_validate(final))
    run_dirs = [p.name for p in (out / SUITE).iterdir()
                if p.is_dir() and p.name not in ("history", "started")]
    assert run_dirs == [run_id]
    manifest = json.loads((out / SUITE / run_id / "manifest.json").read_text())
    assert manifest["status"] == "passed" and manifest["dataset"]["rows_judged"] == ROWS
    assert json.loads((out / SUITE / "latest.json").read_text())["run_id"] == run_id
    history = json.loads((out / SUITE / "history.json").read_text())
    assert [entry["run_id"] for entry in history["entries"]] == [run_id]

    # Every judge call answered once (a chunk cut short at the kill had its answers kept in the
    # reply cache, on by default); the chunks stored before the kill were taken from the run's
    # chunk store, not even looked up in the cache.
    assert len(judge.answered) == ROWS and set(judge.answered.values()) == {1}, (
        judge.answered.most_common(3))
    stored = killer.stored_at_kill
    assert KILL_AFTER_CHUNKS <= len(stored) < ROWS // CHUNK_SIZE  # killed part-way
    assert {path.parents[2].name for path in stored} == {run_id}
    usage = manifest["usage"]
    assert usage["calls"] + usage["cache_hits"] == ROWS  # the cut chunk's answers: cache hits
    assert usage["cache_hits"] <= ROWS - len(stored) * CHUNK_SIZE, usage


# ---- the machine dies: worker and flow run killed together --------------------------------------

HEARTBEAT_SECONDS = "3"  # the run's own heartbeat (flows/run/heartbeat.py), short for the test
HEARTBEAT_WINDOW = "30"  # ten heartbeats: a loaded machine delivers some late


def test_the_zombie_automation_marks_silent_tagged_runs_crashed():
    spec = zombie_automation(window_seconds=90)
    trigger = spec.trigger
    assert trigger.after == {"prefect.flow-run.heartbeat"}
    # The next heartbeat, or any end, closes the window; Running (a retry's start) does not.
    assert trigger.expect >= {"prefect.flow-run.heartbeat", "prefect.flow-run.Completed",
                              "prefect.flow-run.Failed", "prefect.flow-run.Crashed"}
    assert trigger.posture == "Proactive" and trigger.within.total_seconds() == 90
    assert trigger.match_related.root["prefect.resource.id"] == f"prefect.tag.{RESUME_TAG}"
    [action] = spec.actions
    assert (action.type, action.state.value) == ("change-flow-run-state", "CRASHED")
    with pytest.raises(ValueError, match="heartbeat window"):
        zombie_automation(window_seconds=5)


class MachineKiller(FlowRunKiller):
    """SIGKILLs the worker and its flow run together (a machine that dies), once chunks are in."""

    def __init__(self, worker: subprocess.Popen, *args):
        super().__init__(*args)
        self.worker = worker
        self.killed_at: float | None = None

    def _kill(self, pid: int) -> None:
        self.judge.holding.set()
        while not self.judge.quiet() and not self.stop.wait(0.02):
            pass
        time.sleep(0.2)
        # The worker first: it must not live to report the flow run's death.
        os.killpg(self.worker.pid, signal.SIGKILL)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # gone with the worker's process group
            pass
        self.killed_pid, self.killed_at = pid, time.monotonic()
        self.stored_at_kill = self._stored()


def _events(server: Server, name: str, flow_run_id: str) -> list[dict]:
    query = {"limit": 50, "filter": {
        "event": {"name": [name]}, "resource": {"id": [f"prefect.flow-run.{flow_run_id}"]},
        "order": "ASC"}}
    found = server.call("POST", "/events/filter", retry_timeouts=True, json=query)
    return found.raise_for_status().json()["events"]


def test_a_night_whose_machine_died_is_marked_crashed_run_again_and_published_once(
        server, deployed, fake_llm, tmp_path):
    installed = server.run(JUDGEFLOW, "install-automations", "--max-retries", "2",
                           "--delay", "10", "--heartbeat-window", HEARTBEAT_WINDOW).stdout
    assert ZOMBIE_AUTOMATION_NAME in installed, installed

    judge, out, flow_run = _scheduled_night(server, deployed, fake_llm, tmp_path)

    # Prefect's own process worker, as `prefect worker start` runs it: no Prefect heartbeat
    # setting anywhere, so the heartbeats are the run's own.
    env = {k: v for k, v in server.env.items() if k != "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"}
    env["JUDGEFLOW_HEARTBEAT_SECONDS"] = HEARTBEAT_SECONDS
    env["PYTHONUNBUFFERED"] = "1"  # the logs tell what happened when this test fails
    first_log = server.home / "machine-a.log"
    with first_log.open("w") as sink:
        first = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--type", "process", "--pool",
             test_deployments.POOL, "--name", "machine-a", "--limit", "1"],
            cwd=test_deployments.REPO, env=env, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own process group: the machine, killed whole
    killer = MachineKiller(first, flow_run["id"], out / SUITE, KILL_AFTER_CHUNKS, judge)
    killer.start()
    try:
        try:
            _wait_for(lambda: killer.killed_pid is not None or killer.stop.is_set(), 300,
                      "the kill", every=0.2)
        finally:  # the logs as they are now, not when the wait began
            assert killer.killed_pid is not None, _tail(first_log, 6000)
        states = _states(server, flow_run["id"])  # nobody reported it: still Running
        assert states[-1][0] == "RUNNING", states
        with process_workers(server, ("machine-b",), env):  # another machine on the pool
            def finished() -> dict | None:
                now = server.call("GET", f"/flow_runs/{flow_run['id']}").raise_for_status().json()
                return now if now["state"]["type"] in ("COMPLETED", "FAILED") else None

            final = _wait_for(finished, 300, f"the night's end\n{_tail(first_log)}\n"
                              f"{_tail(server.home / 'machine-b.log')}\n{_tail(server.log)}",
                              every=1)
            published_after = time.monotonic() - killer.killed_at
    finally:
        killer.stop.set()
        killer.join()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=20)

    assert final["state"]["type"] == "COMPLETED", final["state"]
    assert final["run_count"] == 2
    states = _states(server, flow_run["id"])
    crashes = _events(server, "prefect.flow-run.Crashed", flow_run["id"])
    beats = _events(server, "prefect.flow-run.heartbeat", flow_run["id"])
    crashed = states.index(("CRASHED", "Crashed"))
    assert states[crashed + 1] == ("SCHEDULED", "AwaitingRetry"), states
    # The run's own heartbeats (no Prefect setting), tagged for the automation, while it ran.
    assert len(beats) >= 2, beats
    assert {"prefect.tag.resume-on-crash"} <= {
        r["prefect.resource.id"] for r in beats[0]["related"]}
    # Marked by the heartbeat automation, with the run count the crash automation bounds on.
    assert [event["resource"].get("prefect.run-count") for event in crashes] == ["1"], crashes
    print(f"published {published_after:.0f} s after the machine died (heartbeat "
          f"{HEARTBEAT_SECONDS} s, window {HEARTBEAT_WINDOW} s, re-run delay 10 s)")

    run_id = flow_run_run_id(FlowRun.model_validate(final))
    run_dirs = [p.name for p in (out / SUITE).iterdir()
                if p.is_dir() and p.name not in ("history", "started")]
    assert run_dirs == [run_id]
    manifest = json.loads((out / SUITE / run_id / "manifest.json").read_text())
    assert manifest["status"] == "passed" and manifest["dataset"]["rows_judged"] == ROWS
    history = json.loads((out / SUITE / "history.json").read_text())
    assert [entry["run_id"] for entry in history["entries"]].count(run_id) == 1
    # The chunks stored before the machine died were taken, not judged again.
    assert len(judge.answered) == ROWS and set(judge.answered.values()) == {1}, (
        judge.answered.most_common(3))


def test_every_deployed_flow_validates_its_parameters_as_a_worker_does():
    """The heartbeat wrapper keeps each flow's parameter model (a worker validates with it)."""
    from flows.compare import compare
    from flows.evaluate import evaluate
    from flows.regression import regression
    from flows.rejudge import rejudge

    data = {"data": "examples/rag_eval.jsonl", "judge": {"model": "judgeflow/offline"}}
    for flow_ in (evaluate, regression):
        assert type(flow_.validate_parameters({"params": data})["params"]).__name__.endswith(
            "Params")
    compared = compare.validate_parameters({"params": {**data, "data": "examples/pairs.jsonl"}})
    assert type(compared["params"]).__name__ == "CompareParams"
    with pytest.raises(Exception, match="source_run"):  # its own model's rule, reached
        rejudge.validate_parameters({"params": {"judge": {"model": "judgeflow/offline"}}})
