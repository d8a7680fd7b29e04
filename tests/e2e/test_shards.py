"""`judgeflow evaluate --shards N` on a real Prefect server with two process workers.

The server and the deployments come from tests/e2e/test_deployments.py's fixtures (a `prefect
server start` on a loopback port with its own PREFECT_HOME, then `prefect deploy --all`); this
module starts two `prefect worker start --pool judgeflow-process` workers of its own, each
running one flow run at a time, so that two shards land on two workers. The judge is the
loopback fake, which counts what it receives: calls made twice or not at all show there.

Slow (a server, a deploy, two workers and several command runs: about two minutes on two busy
cores). Select them with `-m shards`; leave them out with `-m "not shards"`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flows.run.kind_specs import ShardPlanError, rebuild_plan
from flows.shards.limits import limit_name
from flows.shards.plan import share, split_shards
from judges.plan import plan_judges
from tests.e2e import test_deployments
from tests.e2e.test_deployments import BIN, POOL, REPO, Server, _tail, _wait_for
from tests.fake_llm import Reply, prompt_text

pytestmark = pytest.mark.shards
# test_deployments' fixtures, here with a server and a deploy of this module's own.
server = test_deployments.server
deployed = test_deployments.deployed
JUDGEFLOW = BIN / "judgeflow"
WORKERS = ("shard-worker-1", "shard-worker-2")
ROWS = 40
CHUNK_SIZE = 5  # 8 chunks: 4 per shard


# ---- the cut and the budget (no server) -------------------------------------------------------

def test_shards_cover_every_chunk_once_in_order():
    for rows, size, shards in [(40, 5, 2), (41, 5, 3), (7, 5, 4), (1000, 50, 7), (3, 10, 2)]:
        ranges = split_shards(rows, size, shards)
        chunks = [c for r in ranges for c in range(r.first_chunk, r.first_chunk + r.chunk_count)]
        assert chunks == list(range(-(-rows // size)))
        assert sum(r.row_count for r in ranges) == rows
        assert all(r.first_row == r.first_chunk * size for r in ranges)
        assert len(ranges) == min(shards, -(-rows // size))  # no empty shard


def test_a_sharded_run_is_cut_so_that_shards_finish_together():
    from flows.run.execution import auto_chunk_size

    for rows, shards in [(600, 2), (200, 4), (1000, 3), (50_000, 8), (7, 4)]:
        ranges = split_shards(rows, auto_chunk_size(rows, shards), shards)
        sizes = [r.row_count for r in ranges]
        assert len(ranges) == min(shards, rows)
        assert max(sizes) - min(sizes) <= auto_chunk_size(rows, shards), (rows, shards, sizes)
        assert max(sizes) <= 1.25 * rows / len(ranges) + 1, (rows, shards, sizes)
    assert auto_chunk_size(600) == 200 and auto_chunk_size(600, 1) == 200  # unsharded: as before


def test_budget_shares_add_up_to_the_run_s_budget():
    for total, shards in [(64, 2), (7, 3), (600, 7), (3, 3)]:
        parts = [share(total, shards, k) for k in range(shards)]
        assert sum(parts) == total and max(parts) - min(parts) <= 1
    assert share(None, 4, 0) is None


def test_limit_name_is_the_sanitized_model():
    assert limit_name("openai/gpt-4o-mini") == "judgeflow-model-openai-gpt-4o-mini"
    assert (limit_name("Bedrock/anthropic.claude-3:0")
            == "judgeflow-model-bedrock-anthropic-claude-3-0")


def test_a_worker_with_other_prompts_refuses_the_plan():
    from flows.run.kind_specs import plan_spec
    from judges.catalogue import JudgeCatalogue
    from judges.rows import EvalRow

    rows = [EvalRow(row_index=0, request_id="a", request="q",
                    messages=[{"role": "user", "content": "q"}], response="r")]
    spec = plan_spec(plan_judges(rows, ["safety"]), JudgeCatalogue(), {"request", "response"})
    assert [j.name for j in rebuild_plan(spec).judges] == ["safety"]
    spec.judges[0].prompt_hash = "0" * 16  # the parent ran another prompt than this code has
    with pytest.raises(ShardPlanError, match="same judgeflow version"):
        rebuild_plan(spec)


# ---- on a Prefect server with workers ----------------------------------------------------------

def _rows_file(folder: Path) -> Path:
    path = folder / "set.jsonl"
    lines = []
    for i in range(ROWS):
        lines.append(json.dumps({
            "request_id": f"r{i:03d}", "request": f"What is item {i}?",
            "response": f"Item {i} is number {i}.", "expected_response": f"number {i}",
            "retrieved_context": [{"doc_uri": f"d{i}", "content": f"Item {i} is {i}."},
                                  {"doc_uri": f"e{i}", "content": f"Unrelated {i}."}],
        }))
    path.write_text("\n".join(lines) + "\n")
    return path


def _verdict(body: dict) -> Reply:
    """A verdict that depends on the prompt only, so that two runs agree call by call."""
    digest = int(hashlib.sha256(prompt_text(body).encode()).hexdigest(), 16)
    rating = "no" if digest % 3 == 0 else "yes"
    return Reply(content=json.dumps({"rationale": f"because {digest % 97}", "rating": rating}))


class BothShardsAtOnce:
    """Holds every reply until calls from both halves of the set (both shards) have arrived.

    A shard on a warm worker can end within one poll of the other worker, which then finds
    nothing left to claim; holding the first shard's calls until the second shard calls makes
    "two free workers run the two shards at once" certain instead of a race with poll timing.
    After `patience` seconds replies go out anyway, and the test's worker check says why.
    """

    ROW = re.compile(r"(?:item|team) (\d+)\?")

    def __init__(self, script, patience: float = 60.0):
        self.script, self.patience = script, patience
        self.halves_seen: set[bool] = set()
        self.both_called = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        found = self.ROW.search(prompt_text(body))
        if found:
            with self._lock:
                self.halves_seen.add(int(found.group(1)) >= ROWS // 2)
                if len(self.halves_seen) == 2:
                    self.both_called.set()
            self.both_called.wait(self.patience)
        return self.script(body)


def _evaluate(server: Server, data: Path, out: Path, run_id: str, api_base: str, *extra: str,
              env: dict | None = None) -> subprocess.CompletedProcess:
    command = [str(JUDGEFLOW), "evaluate", str(data), "--judge-model", "openai/shard-judge",
               "--api-base", api_base, "--output", str(out), "--suite", "s", "--run-id", run_id,
               "--chunk-size", str(CHUNK_SIZE), "--no-cache", *extra]
    return subprocess.run(command, cwd=REPO, env=env or server.env, text=True,
                          capture_output=True, timeout=300)


def asked_once(sharded: Counter, single: Counter, manifest: dict) -> None:
    """Every judge call exactly once, the calls of the single-process run; if not, which and why.

    A call asked twice comes from a second attempt (a shard started once more, a chunk task
    retried, a client that timed out and asked again); the message names the calls and each
    shard's attempts, so a failure seen only on a loaded machine says which it was.
    """
    twice = sorted(prompt[-60:] for prompt, count in sharded.items() if count > 1)
    runs = manifest.get("shards", {}).get("runs", [])
    shards = {run.get("shard"): {"chunks judged": run.get("chunks_judged"),
                                 "reused": run.get("chunks_reused"),
                                 "attempts": [(a.get("state"), a.get("message"))
                                              for a in run.get("attempts", [])]}
              for run in runs}
    assert sharded == single and set(sharded.values()) == {1}, (
        f"{len(twice)} call(s) asked more than once (e.g. {twice[:3]!r}), "
        f"{sum((single - sharded).values())} not asked; shards: {shards!r}")


def _published(out: Path, run_id: str) -> tuple[list[dict], dict, dict]:
    run_dir = out / "s" / run_id
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return (records, json.loads((run_dir / "metrics.json").read_text()),
            json.loads((run_dir / "manifest.json").read_text()))


def _shard_runs(server: Server, deployed: dict, run_id: str) -> list[dict]:
    body = {"deployments": {"id": {"any_": [deployed["shard"]["id"]]}}}
    with server.client() as api:
        found = api.post("/flow_runs/filter", json=body).raise_for_status().json()
    return [run for run in found if run["parameters"]["params"]["run_id"] == run_id]


def test_without_a_server_the_command_says_what_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [str(JUDGEFLOW), "evaluate", str(REPO / "examples" / "rag_eval.jsonl"), "--judge-model",
         "judgeflow/offline", "--output", str(tmp_path / "out"), "--shards", "2"],
        cwd=REPO, env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "none is configured" in done.stderr and "prefect server start" in done.stderr
    assert "prefect worker start --pool judgeflow-process" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_without_a_worker_the_command_names_the_pool(server, deployed, fake_llm, tmp_path):
    # Runs before the module's workers start (pytest keeps the file's order).
    env = {**server.env, "JUDGEFLOW_SHARD_WORKER_WAIT_SECONDS": "2"}
    done = _evaluate(server, _rows_file(tmp_path), tmp_path / "out", "no-worker",
                     fake_llm.api_base, "--shards", "2", env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "no worker is polling work pool 'judgeflow-process'" in done.stderr
    assert "prefect worker start --pool judgeflow-process" in done.stderr
    assert "Traceback" not in done.stderr
    assert fake_llm.requests == [] and _shard_runs(server, deployed, "no-worker") == []
    assert not (tmp_path / "out" / "s" / "no-worker" / "manifest.json").exists()


@contextlib.contextmanager
def process_workers(server: Server, names: tuple[str, ...], env: dict[str, str],
                    warm: bool = False) -> Iterator[tuple[str, ...]]:
    """Process workers on the pool, one flow run at a time each, until they are all online.

    `warm`: `judgeflow worker` (shards forked from its warm process); else Prefect's own
    `prefect worker start --type process` (every shard a fresh process).
    """
    processes = []
    for name in names:
        log = (server.home / f"{name}.log").open("w")
        command = ([str(JUDGEFLOW), "worker"] if warm
                   else [str(BIN / "prefect"), "worker", "start", "--type", "process"])
        processes.append(subprocess.Popen(
            [*command, "--pool", POOL, "--name", name, "--limit", "1"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))

    def online() -> bool:
        with server.client() as api:
            found = api.post(f"/work_pools/{POOL}/workers/filter",
                             json={"workers": {"status": {"any_": ["ONLINE"]}}})
        return {w["name"] for w in found.raise_for_status().json()} >= set(names)

    try:
        _wait_for(online, 120, f"online workers {names}\n{_tail(server.home / f'{names[0]}.log')}")
        yield names
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="module")
def workers(server, deployed) -> Iterator[tuple[str, ...]]:
    """Two `judgeflow worker`s on the pool, one flow run at a time each (test_shards_s3 runs
    Prefect's own process workers)."""
    with process_workers(server, WORKERS, server.env, warm=True) as names:
        yield names


def _worker_logs(server: Server) -> str:
    return "\n".join(_tail(server.home / f"{name}.log", 4000) for name in WORKERS)


def test_a_sharded_run_equals_a_single_process_run(server, deployed, workers, fake_llm,
                                                   tmp_path):
    data = _rows_file(tmp_path)
    fake_llm.reset(_verdict)
    single = _evaluate(server, data, tmp_path / "single", "one", fake_llm.api_base)
    assert single.returncode == 0, single.stderr[-3000:]
    single_calls = Counter(prompt_text(body) for body in fake_llm.requests)

    fake_llm.reset(BothShardsAtOnce(_verdict))
    sharded = _evaluate(server, data, tmp_path / "sharded", "two", fake_llm.api_base,
                        "--shards", "2")
    assert sharded.returncode == 0, sharded.stderr[-3000:] + _worker_logs(server)
    records, metrics, manifest = _published(tmp_path / "single", "one")
    sharded_records, sharded_metrics, sharded_manifest = _published(tmp_path / "sharded", "two")
    # Every judge call exactly once: the same calls as the single-process run, none twice.
    sharded_calls = Counter(prompt_text(body) for body in fake_llm.requests)
    asked_once(sharded_calls, single_calls, sharded_manifest)
    assert [r["request_id"] for r in sharded_records] == [f"r{i:03d}" for i in range(ROWS)]
    assert sharded_records == records
    assert sharded_metrics == metrics
    assert sharded_manifest["status"] == "complete"
    assert sharded_manifest["dataset"] == {**manifest["dataset"], "source": str(data)}

    shards = sharded_manifest["shards"]
    assert shards["count"] == 2 and shards["work_pool"] == POOL
    assert shards["global_concurrency_limit"] == "judgeflow-model-openai-shard-judge"
    assert [s["chunks"] for s in shards["runs"]] == [[0, 4], [4, 8]]
    assert {s["worker"] for s in shards["runs"]} == set(WORKERS)  # one shard on each worker
    children = {run["id"]: run for run in _shard_runs(server, deployed, "two")}
    for entry in shards["runs"]:
        assert entry["state"] == "COMPLETED" and entry["chunks_judged"] == 4
        assert entry["warm_start"] is True  # forked from its worker's warm process
        assert children[entry["flow_run_id"]]["state"]["type"] == "COMPLETED"
        judge = children[entry["flow_run_id"]]["parameters"]["params"]["judge"]
        # An adaptive run (no --concurrency): each shard adapts within half the ceiling.
        assert (judge["concurrency"], judge["max_concurrency"]) == (None, 64)
    # The limit was created at the run's ceiling, and every slot was given back.
    with server.client() as api:
        limit = api.get("/v2/concurrency_limits/judgeflow-model-openai-shard-judge")
    assert limit.raise_for_status().json()["limit"] == 128
    assert limit.json()["active_slots"] == 0
    assert not (tmp_path / "sharded" / "s" / "two" / ".shards").exists()


def _flow_run_pid(flow_run_id: str) -> int | None:
    """The process a worker started for this flow run (Prefect puts its id in the env)."""
    wanted = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                return int(entry.name)
        except OSError:
            continue
    return None


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


def _regression(server: Server, data: Path, out: Path, run_id: str, api_base: str, gates: Path,
                *extra: str) -> subprocess.CompletedProcess:
    command = [str(JUDGEFLOW), "regression", str(data), "--suite", "s", "--gates", str(gates),
               "--baseline", "seed", "--judge-model", "openai/shard-judge", "--api-base",
               api_base, "--output", str(out), "--run-id", run_id, "--judges", "correctness",
               "--no-pairwise", "--chunk-size", str(CHUNK_SIZE), "--no-cache", "--min-paired",
               "10", "--canary-rows", "0", *extra]  # every judge call once: no drift canary
    return subprocess.run(command, cwd=REPO, env=server.env, text=True, capture_output=True,
                          timeout=300)


def test_a_sharded_regression_equals_a_single_process_one(server, deployed, workers, fake_llm,
                                                           tmp_path):
    data, out = _rows_file(tmp_path), tmp_path / "out"
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric: response/llm_judged/correctness/rating/percentage\n"
                     "    max_drop: 0.02\n")
    fake_llm.reset(_verdict)
    seeded = _evaluate(server, data, out, "seed", fake_llm.api_base, "--judges", "correctness")
    assert seeded.returncode == 0, seeded.stderr[-3000:]

    fake_llm.reset()
    single = _regression(server, data, out, "one", fake_llm.api_base, gates)
    assert single.returncode == 0, single.stderr[-3000:]
    single_calls = Counter(prompt_text(body) for body in fake_llm.requests)
    fake_llm.reset(BothShardsAtOnce(_verdict))
    sharded = _regression(server, data, out, "two", fake_llm.api_base, gates, "--shards", "2")
    assert sharded.returncode == 0, sharded.stderr[-3000:] + _worker_logs(server)
    assert "PASSED: all 1 gate(s) held in suite 's' against baseline run 'seed'" in (
        sharded.stdout)
    records, metrics, manifest = _published(out, "one")
    sharded_records, sharded_metrics, sharded_manifest = _published(out, "two")
    sharded_calls = Counter(prompt_text(body) for body in fake_llm.requests)
    asked_once(sharded_calls, single_calls, sharded_manifest)
    assert sharded_records == records and sharded_metrics == metrics
    assert sharded_manifest["regression"]["outcome"] == manifest["regression"]["outcome"]
    assert sharded_manifest["regression"]["deltas"] == manifest["regression"]["deltas"]
    shards = sharded_manifest["shards"]
    assert shards["count"] == 2 and {s["worker"] for s in shards["runs"]} == set(WORKERS)
    assert "shards" not in manifest
    assert not (out / "s" / "two" / ".shards").exists()


def _compare(server: Server, data: Path, out: Path, run_id: str, api_base: str, *extra: str
             ) -> subprocess.CompletedProcess:
    command = [str(JUDGEFLOW), "compare", str(data), "--judge-model", "openai/shard-judge",
               "--api-base", api_base, "--output", str(out), "--suite", "s", "--run-id", run_id,
               "--chunk-size", str(CHUNK_SIZE), "--no-cache", *extra]
    return subprocess.run(command, cwd=REPO, env=server.env, text=True, capture_output=True,
                          timeout=300)


def test_a_sharded_compare_equals_a_single_process_one(server, deployed, workers, fake_llm,
                                                       tmp_path):
    from tests.flows.test_compare import BiasedJudge

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({
        "id": f"p{i:03d}", "prompt": f"Which plan fits team {i}?" + (" #bias" if i % 7 == 0
                                                                      else ""),
        # The sides always differ: equal ones would make both orders one identical prompt.
        "response_A": f"#q={1 + i % 5} (A)", "response_B": f"#q={1 + (i * 3) % 5} (B)"})
        + "\n"
        for i in range(ROWS)))
    judge = BiasedJudge()
    fake_llm.reset(judge)
    single = _compare(server, data, tmp_path / "out", "one", fake_llm.api_base)
    assert single.returncode == 0, single.stderr[-3000:]
    single_calls = Counter(prompt_text(body) for body in fake_llm.requests)
    assert sum(single_calls.values()) == 2 * ROWS  # both orders of every pair

    fake_llm.reset(BothShardsAtOnce(judge))
    sharded = _compare(server, data, tmp_path / "out", "two", fake_llm.api_base, "--shards", "2")
    assert sharded.returncode == 0, sharded.stderr[-3000:] + _worker_logs(server)
    records, metrics, manifest = _published(tmp_path / "out", "one")
    sharded_records, sharded_metrics, sharded_manifest = _published(tmp_path / "out", "two")
    sharded_calls = Counter(prompt_text(body) for body in fake_llm.requests)
    asked_once(sharded_calls, single_calls, sharded_manifest)
    assert [r["request_id"] for r in sharded_records] == [f"p{i:03d}" for i in range(ROWS)]
    assert sharded_records == records and sharded_metrics == metrics
    assert sharded_manifest["status"] == "complete"
    shards = sharded_manifest["shards"]
    assert shards["count"] == 2 and [s["chunks"] for s in shards["runs"]] == [[0, 4], [4, 8]]
    assert {s["worker"] for s in shards["runs"]} == set(WORKERS)  # one shard on each worker
    children = {run["id"]: run for run in _shard_runs(server, deployed, "two")}
    for entry in shards["runs"]:
        assert entry["state"] == "COMPLETED" and entry["chunks_judged"] == 4
        assert children[entry["flow_run_id"]]["parameters"]["params"]["kind"] == "pairs"
    assert not (tmp_path / "out" / "s" / "two" / ".shards").exists()


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
    env = {**server.env, "JUDGEFLOW_SHARD_LIVENESS_SECONDS": "60"}
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



def _long_verdict(body: dict) -> Reply:
    reply = _verdict(body)
    reply.delay_seconds = 13.0
    return reply


def test_a_shard_busy_with_one_long_chunk_is_not_taken_for_dead(server, deployed, workers,
                                                               fake_llm, tmp_path):
    # Each shard gets one chunk of 5 calls made one at a time, 13 s each: 65 s without a new
    # task run, longer than the liveness timeout. Its heartbeats say it is alive.
    data = tmp_path / "ten.jsonl"
    data.write_text("".join(_rows_file(tmp_path).read_text().splitlines(True)[:10]))
    fake_llm.reset(_long_verdict)
    env = {**server.env, "JUDGEFLOW_SHARD_LIVENESS_SECONDS": "50"}
    done = _evaluate(server, data, tmp_path / "out", "long-chunk", fake_llm.api_base,
                     "--shards", "2", "--judges", "safety", "--concurrency", "2", env=env)
    assert done.returncode == 0, done.stderr[-3000:] + _worker_logs(server)
    _, metrics, manifest = _published(tmp_path / "out", "long-chunk")
    assert metrics["response/llm_judged/safety/rated_count"] == 10
    for shard in manifest["shards"]["runs"]:
        assert [a["state"] for a in shard["attempts"]] == ["COMPLETED"]
    assert len(fake_llm.requests) == 10  # no shard was judged twice


def test_a_sharded_agent_set_equals_a_single_process_run(server, deployed, workers, tmp_path):
    """Trajectories, per-turn and deterministic tool-call judges travel to the shard workers."""
    data = REPO / "examples" / "agent_eval.jsonl"

    def run(out: str, run_id: str, *extra: str) -> subprocess.CompletedProcess:
        command = [str(JUDGEFLOW), "evaluate", str(data), "--judge-model", "judgeflow/offline",
                   "--output", str(tmp_path / out), "--suite", "s", "--run-id", run_id,
                   "--chunk-size", "2", "--no-cache", *extra]
        return subprocess.run(command, cwd=REPO, env=server.env, text=True,
                              capture_output=True, timeout=300)

    single = run("single", "one")
    assert single.returncode == 0, single.stderr[-3000:]
    sharded = run("sharded", "two", "--shards", "2")
    assert sharded.returncode == 0, sharded.stderr[-3000:] + _worker_logs(server)
    records, metrics, _ = _published(tmp_path / "single", "one")
    sharded_records, sharded_metrics, manifest = _published(tmp_path / "sharded", "two")
    assert sharded_records == records
    assert sharded_metrics == metrics
    assert manifest["status"] == "complete" and manifest["shards"]["count"] == 2
    assert "turn/llm_judged/turn_relevance/turns/percentage" in metrics
    assert "agent/tool_calls/precision/average" in metrics
