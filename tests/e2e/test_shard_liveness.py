"""Shards that die, fall silent or stay busy: the parent's liveness check, on a real Prefect server.

The server, the deploy and the two `judgeflow worker`s are test_shards.py's fixtures (a module
of their own here: this file runs next to test_shards.py on another test worker, not after it).
The workers' shards send heartbeats every test_shards.HEARTBEAT_SECONDS; the parent presumes a
Running shard dead after LIVENESS_SECONDS without a sign of life (flows/shards/watch.py).

Slow (a server, a deploy, two workers, runs killed, stopped and kept waiting: about four
minutes on two busy cores). Selected with the other worker tests by `-m shards`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.e2e import test_deployments, test_shards
from tests.e2e.test_deployments import Server
from tests.e2e.test_shards import (
    CHUNK_SIZE,
    ROWS,
    _evaluate,
    _flow_run_pid,
    _published,
    _rows_file,
    _shard_runs,
    _verdict,
    _worker_logs,
)
from tests.fake_llm import Reply, prompt_text

pytestmark = pytest.mark.shards
# test_shards' fixtures, here with a server, a deploy and workers of this module's own.
server = test_deployments.server
deployed = test_deployments.deployed
workers = test_shards.workers
# A shard silent this long (ten of its heartbeats missed) is presumed dead.
LIVENESS_SECONDS = "20"


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
                for child in (task / "children").read_text().split()]
    except OSError:
        return []


def _engine_pids(pid: int) -> list[int]:
    """The flow run's process and, for a warm start, the forked engine that runs it.

    A `judgeflow worker` runs `flows.shards.warm_start`, which hands the run to its worker's
    warm process; with one flow run per worker, that process's one child is this run's engine.
    """
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        worker = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except OSError:
        return [pid]
    if b"flows.shards.warm_start" not in command:
        return [pid]
    warm = [child for child in _children(worker)
            if b"flows.shards.warm_server" in Path(f"/proc/{child}/cmdline").read_bytes()]
    return [pid, *(engine for server in warm for engine in _children(server))]


class ShardKiller(threading.Thread):
    """Kills the second shard's process once one of its chunks is stored, `times` times.

    The process is found as soon as its flow run is Running, so that the kill follows the
    stored chunk closely (an API query on a busy machine can take seconds).
    """

    def __init__(self, server: Server, deployed: dict, run_id: str, run_dir: Path, times: int,
                 sent: signal.Signals = signal.SIGKILL):
        super().__init__(daemon=True)
        self.sent, self.pids = sent, []
        self.server, self.deployed, self.run_id = server, deployed, run_id
        self.stored = run_dir / ".chunks" / "judge" / "000004.json"  # shard 2's first chunk
        self.times, self.killed, self.stop = times, [], threading.Event()

    def _running_second_shard(self) -> tuple[str, int] | None:
        try:
            runs = _shard_runs(self.server, self.deployed, self.run_id)
        except httpx.HTTPError:  # a busy test server answered late: poll again
            return None
        for found in runs:
            if (found["parameters"]["params"]["shard"] == 1 and found["id"] not in self.killed
                    and found["state"]["type"] == "RUNNING"):
                pid = _flow_run_pid(found["id"])
                if pid is not None:
                    return found["id"], pid
        return None

    def run(self) -> None:
        target = None
        while len(self.killed) < self.times and not self.stop.wait(0.05):
            target = target or self._running_second_shard()
            if target is not None and self.stored.exists():
                # A stop freezes the engine too (a killed warm_start takes its engine along).
                pids = _engine_pids(target[1]) if self.sent == signal.SIGSTOP else [target[1]]
                try:
                    for pid in pids:
                        os.kill(pid, self.sent)
                    self.killed.append(target[0])
                    self.pids.extend(pids)
                except ProcessLookupError:  # it ended before it could be killed
                    pass
                target = None


def _slow_verdict(body: dict) -> Reply:
    reply = _verdict(body)
    reply.delay_seconds = 0.25
    return reply


def _run_with_killer(server, deployed, fake_llm, tmp_path, run_id: str, times: int):
    data = _rows_file(tmp_path)
    fake_llm.reset(_slow_verdict)
    killer = ShardKiller(server, deployed, run_id, tmp_path / "out" / "s" / run_id, times)
    killer.start()
    try:
        done = _evaluate(server, data, tmp_path / "out", run_id, fake_llm.api_base,
                         "--shards", "2", "--judges", "safety", "--concurrency", "2")
    finally:
        killer.stop.set()
        killer.join()
    return done, killer


def test_a_shard_killed_mid_way_is_run_again_and_the_run_completes(server, deployed, workers,
                                                                   fake_llm, tmp_path):
    done, killer = _run_with_killer(server, deployed, fake_llm, tmp_path, "killed-once", 1)
    assert len(killer.killed) == 1
    assert done.returncode == 0, done.stderr[-3000:] + _worker_logs(server)
    records, metrics, manifest = _published(tmp_path / "out", "killed-once")
    assert [r["request_id"] for r in records] == [f"r{i:03d}" for i in range(ROWS)]
    assert metrics["response/llm_judged/safety/error_count"] == 0
    assert metrics["response/llm_judged/safety/rated_count"] == ROWS
    second = manifest["shards"]["runs"][1]
    assert [a["state"] for a in second["attempts"]] == ["CRASHED", "COMPLETED"]
    assert second["attempts"][0]["flow_run_id"] == killer.killed[0]
    assert second["chunks_reused"] >= 1  # what the killed attempt finished was kept
    # The chunk stored before the kill was not judged again.
    asked = Counter(prompt_text(body) for body in fake_llm.requests)
    for i in range(20, 25):
        assert sum(n for text, n in asked.items() if f"What is item {i}?" in text) == 1


def test_a_shard_that_fails_for_good_leaves_its_rows_as_errors(server, deployed, workers,
                                                               fake_llm, tmp_path):
    done, killer = _run_with_killer(server, deployed, fake_llm, tmp_path, "killed-twice", 2)
    assert len(killer.killed) == 2
    assert done.returncode == 3, done.stderr[-3000:] + _worker_logs(server)
    assert "shard 2 of 2" in done.stderr and "CRASHED" in done.stderr
    records, metrics, manifest = _published(tmp_path / "out", "killed-twice")
    # Every row is there, in order: none silently dropped.
    assert [r["request_id"] for r in records] == [f"r{i:03d}" for i in range(ROWS)]
    assert manifest["status"] == "incomplete"
    assert any("shard 2 of 2" in reason for reason in manifest["incomplete_reasons"])
    errors = [r.get("response/llm_judged/safety/error_message") for r in records]
    # Shard 1 and the chunks shard 2 stored before it was killed are judged; the rest of
    # shard 2's rows are errors that say which shard, which flow run and how it ended.
    first_error = next(i for i, error in enumerate(errors) if error is not None)
    assert first_error >= 25 and first_error % CHUNK_SIZE == 0
    for error in errors[first_error:]:
        assert "shard 2 of 2" in error and killer.killed[-1] in error and "CRASHED" in error
    assert metrics["response/llm_judged/safety/error_count"] == ROWS - first_error
    assert manifest["shards"]["runs"][1]["state"] == "CRASHED"


def test_a_shard_whose_worker_went_silent_is_crashed_and_run_again(server, deployed, workers,
                                                                   fake_llm, tmp_path):
    # SIGSTOP: the shard's process neither works nor ends, so its flow run stays Running, as
    # when its worker's machine is gone. Only the liveness timeout can end the wait.
    data = _rows_file(tmp_path)
    fake_llm.reset(_slow_verdict)
    run_id = "silent"
    freezer = ShardKiller(server, deployed, run_id, tmp_path / "out" / "s" / run_id, 1,
                          signal.SIGSTOP)
    freezer.start()
    env = {**server.env, "JUDGEFLOW_SHARD_LIVENESS_SECONDS": LIVENESS_SECONDS}
    try:
        done = _evaluate(server, data, tmp_path / "out", run_id, fake_llm.api_base,
                         "--shards", "2", "--judges", "safety", "--concurrency", "2", env=env)
    finally:
        freezer.stop.set()
        freezer.join()
        for pid in freezer.pids:  # the process this test stopped: end it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert len(freezer.killed) == 1
    assert done.returncode == 0, done.stderr[-3000:] + _worker_logs(server)
    records, metrics, manifest = _published(tmp_path / "out", run_id)
    assert [r["request_id"] for r in records] == [f"r{i:03d}" for i in range(ROWS)]
    assert metrics["response/llm_judged/safety/error_count"] == 0
    second = manifest["shards"]["runs"][1]
    assert [a["state"] for a in second["attempts"]] == ["CRASHED", "COMPLETED"]
    assert "presumed dead" in second["attempts"][0]["message"]
    assert second["chunks_reused"] >= 1



# One call of a long chunk. The parent looks at a shard's liveness every 15 s
# (flows/shards/watch.py LIVENESS_POLL_SECONDS): a chunk of 5 such calls (40 s) is older than
# the liveness timeout for 20 s after its start, so at least one look falls in that time.
LONG_CALL_SECONDS = 8.0


def _long_verdict(body: dict) -> Reply:
    reply = _verdict(body)
    reply.delay_seconds = LONG_CALL_SECONDS
    return reply


def test_a_shard_busy_with_one_long_chunk_is_not_taken_for_dead(server, deployed, workers,
                                                               fake_llm, tmp_path):
    # Each shard gets one chunk of 5 calls made one at a time, 8 s each: 40 s without a new
    # task run, twice the liveness timeout. Its heartbeats say it is alive.
    from flows.shards.watch import LIVENESS_POLL_SECONDS

    assert 5 * LONG_CALL_SECONDS >= float(LIVENESS_SECONDS) + LIVENESS_POLL_SECONDS
    data = tmp_path / "ten.jsonl"
    data.write_text("".join(_rows_file(tmp_path).read_text().splitlines(True)[:10]))
    fake_llm.reset(_long_verdict)
    env = {**server.env, "JUDGEFLOW_SHARD_LIVENESS_SECONDS": LIVENESS_SECONDS}
    done = _evaluate(server, data, tmp_path / "out", "long-chunk", fake_llm.api_base,
                     "--shards", "2", "--judges", "safety", "--concurrency", "2", env=env)
    assert done.returncode == 0, done.stderr[-3000:] + _worker_logs(server)
    _, metrics, manifest = _published(tmp_path / "out", "long-chunk")
    assert metrics["response/llm_judged/safety/rated_count"] == 10
    for shard in manifest["shards"]["runs"]:
        assert [a["state"] for a in shard["attempts"]] == ["COMPLETED"]
    assert len(fake_llm.requests) == 10  # no shard was judged twice
