"""Publishing a run to an S3-protocol server (moto in server mode, behind a fault proxy)."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from tasks.storage import outputs
from tasks.storage.outputs import PublishError, RunLocation
from tests.fake_llm import Reply
from tests.s3_server import S3Bucket, s3_fixture, s3_server_fixture  # noqa: F401 - fixtures

RAG_EVAL = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
DATA_FILES = ["results.jsonl", "results.parquet", "rejected.jsonl", "metrics.json", "report.html",
              "summary.md", "calls.jsonl"]
RUN_FILES = [*DATA_FILES, "manifest.json"]
# botocore retries a 500 itself (5 attempts by default, with backoff) inside each publisher
# attempt; the fault tests keep that to 2 so that failing for good takes seconds, not half a minute.
FEW_BOTO_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 2, "mode": "standard"}}}
ROWS = [
    {"request_id": f"q{i}", "request": f"What is {i} + {i}?", "response": f"{2 * i}",
     "expected_response": f"{2 * i}"}
    for i in range(6)
]


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch):
    """Publisher retries without the production pauses (the attempts are what is tested)."""
    monkeypatch.setattr(outputs, "WRITE_BACKOFF_SECONDS", 0.01)


def _params(bucket: S3Bucket, **overrides) -> EvaluateParams:
    values = {
        "data": str(RAG_EVAL), "judge": JudgeModel(model="judgeflow/offline"),
        "output": bucket.url("evals"), "suite": "rag", "run_id": "run1", "use_cache": False,
        "storage_options": bucket.storage_options,
    }
    return EvaluateParams(**{**values, **overrides})


def _run(params: EvaluateParams) -> dict:
    return asyncio.run(evaluate(params))


def _read_json(fs, path: str):
    return json.loads(fs.cat_file(path))


def test_a_run_is_published_whole_and_in_order(s3):
    setup = len(s3.requests())  # the fixture's bucket creation
    result = _run(_params(s3))
    run_dir = f"{s3.name}/evals/rag/run1"
    # The resumable chunks (tasks/storage/chunk_store.py) come and go beside the published files:
    # one read, one write and one delete per chunk, all under .chunks/ (no listing).
    chunk_traffic = [r for r in s3.requests()[setup:] if r.path.startswith(f"/{run_dir}/.chunks/")]
    assert {r.method for r in chunk_traffic} == {"GET", "PUT", "DELETE"}
    # The suite's history (tasks/storage/history.py) comes after the run is published: it
    # lists history/ (a GET on the bucket), reads history.json, writes three files.
    history_traffic = [r for r in s3.requests()[setup:] if r.path == f"/{s3.name}"
                       or r.path.startswith(f"/{s3.name}/evals/rag/history")
                       or r.path == f"/{s3.name}/evals/rag/index.html"]
    assert {r.method for r in history_traffic} == {"GET", "PUT"}
    published = [r for r in s3.requests()[setup:]
                 if r not in chunk_traffic and r not in history_traffic]

    fs = s3.filesystem()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(run_dir)) == sorted(RUN_FILES)
    assert result["files"]["report.html"] == f"s3://{run_dir}/report.html"
    manifest = _read_json(fs, f"{run_dir}/manifest.json")
    assert manifest["files"] == RUN_FILES and manifest["status"] == "complete"
    lines = fs.cat_file(f"{run_dir}/results.jsonl").decode().splitlines()
    assert len(lines) == manifest["dataset"]["rows_judged"] == 12
    frame = pd.read_parquet(io.BytesIO(fs.cat_file(f"{run_dir}/results.parquet")))
    assert sorted(frame["request_id"]) == sorted(json.loads(x)["request_id"] for x in lines)
    assert _read_json(fs, f"{run_dir}/metrics.json")["rows/judged"] == 12
    assert b"<html" in fs.cat_file(f"{run_dir}/report.html").lower()
    # served as a web page, not a download, when opened from the bucket
    assert fs.info(f"{run_dir}/report.html")["ContentType"].startswith("text/html")
    latest = _read_json(fs, f"{s3.name}/evals/rag/latest.json")
    assert latest["run_id"] == "run1"
    assert latest["manifest"] == f"s3://{run_dir}/manifest.json"
    assert latest["run_url"] == f"s3://{run_dir}"

    # Order as the server saw it: every data file, then the manifest, then the pointers (a
    # complete evaluate run becomes the suite's baseline too), then the suite's history.
    written = [k for k in s3.keys_written() if not k.startswith("evals/rag/run1/.chunks/")]
    names = [k.removeprefix("evals/rag/run1/") for k in written]
    data_count = len(DATA_FILES)
    assert sorted(names[:data_count]) == sorted(DATA_FILES)
    assert names[data_count:] == [
        "manifest.json", "evals/rag/latest.json", "evals/rag/baseline.json",
        "evals/rag/history/run1.json", "evals/rag/history.json", "evals/rag/index.html"]
    # Publishing asks for nothing but object writes under the prefix (a writer role with
    # s3:PutObject on the prefix suffices): no bucket probes, no CreateBucket. The one
    # DELETE withdraws a manifest left by an earlier publish of the same run id.
    assert {r.method for r in published} == {"PUT", "DELETE"}
    assert [r.path for r in published if r.method == "DELETE"] == [f"/{run_dir}/manifest.json"]
    assert all(r.path.startswith(f"/{s3.name}/evals/rag/") for r in published)


def test_publishing_works_without_bucket_level_permissions(s3):
    # A least-privilege writer: HeadBucket, GetBucketLocation, ListBucket, CreateBucket denied.
    s3.fail(rf"^/{s3.name}/?$", status=403, methods=frozenset({"HEAD", "GET", "PUT"}))
    result = _run(_params(s3))
    # The run's own entry is written; without ListBucket the history stops there, and the run
    # is published whole all the same (the history is not part of it).
    assert [k.rsplit("/", 1)[1] for k in s3.keys_written()][-4:] == ["manifest.json",
                                                                     "latest.json",
                                                                     "baseline.json",
                                                                     "run1.json"]
    assert result["status"] == "complete" and "history.html" not in result["files"]


def test_a_failed_upload_fails_the_run_and_says_what_was_written(s3):
    fs = s3.filesystem()
    _run(_params(s3, run_id="good"))
    before = fs.cat_file(f"{s3.name}/evals/rag/latest.json")

    fault = s3.fail(r"/evals/rag/bad/report\.html$")
    with pytest.raises(PublishError) as caught:
        _run(_params(s3, run_id="bad",
                     storage_options={**s3.storage_options, **FEW_BOTO_RETRIES}))

    message = str(caught.value)
    written, _, not_written = message.partition("Written:")[2].partition("Not written:")
    for name in ("results.jsonl", "results.parquet", "rejected.jsonl", "metrics.json"):
        assert f"s3://{s3.name}/evals/rag/bad/{name}" in written, message
    assert "report.html" in not_written and "manifest.json" in not_written, message
    assert "report.html" not in written, message
    assert fault.hits == 2 * outputs.WRITE_ATTEMPTS  # every attempt reached the server
    assert not fs.exists(f"{s3.name}/evals/rag/bad/manifest.json")
    assert not fs.exists(f"{s3.name}/evals/rag/bad/report.html")
    assert fs.cat_file(f"{s3.name}/evals/rag/latest.json") == before  # still the good run


def test_a_failed_first_upload_leaves_no_latest(s3):
    s3.fail(r"/metrics\.json$")
    with pytest.raises(PublishError, match="metrics.json"):
        _run(_params(s3, storage_options={**s3.storage_options, **FEW_BOTO_RETRIES}))
    fs = s3.filesystem()
    assert not fs.exists(f"{s3.name}/evals/rag/latest.json")
    assert not fs.exists(f"{s3.name}/evals/rag/run1/manifest.json")
    assert "metrics.json" not in {k.rsplit("/", 1)[1] for k in s3.keys_written()}


def test_a_transient_fault_is_retried_and_the_run_completes(s3):
    # As many failures as botocore's own attempts, so the publisher's retry is what heals it.
    fault = s3.fail(r"/evals/rag/run1/report\.html$", times=2)
    _run(_params(s3, storage_options={**s3.storage_options, **FEW_BOTO_RETRIES}))
    assert fault.hits == 2
    fs = s3.filesystem()
    assert fs.exists(f"{s3.name}/evals/rag/run1/manifest.json")
    assert _read_json(fs, f"{s3.name}/evals/rag/latest.json")["run_id"] == "run1"
    puts = [r.status for r in s3.requests("PUT") if r.path.endswith("/run1/report.html")]
    assert puts == [500, 500, 200]


class LatestReader:
    """A reader polling {suite}/latest.json in a thread, checking the run it points at."""

    def __init__(self, bucket: S3Bucket, suite_dir: str):
        self.fs = bucket.filesystem()
        self.latest_path = f"{suite_dir}/latest.json"
        self.seen: list[str] = []
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> LatestReader:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                raw = self.fs.cat_file(self.latest_path)
            except FileNotFoundError:
                continue
            try:
                self._check(json.loads(raw))
            except Exception as error:  # noqa: BLE001 - every surprise is a finding
                self.problems.append(f"{type(error).__name__}: {error}")

    def _check(self, latest: dict) -> None:
        run_dir = latest["manifest"].removeprefix("s3://").rsplit("/", 1)[0]
        manifest = json.loads(self.fs.cat_file(f"{run_dir}/manifest.json"))
        for name in manifest["files"]:
            self.fs.info(f"{run_dir}/{name}")
        lines = self.fs.cat_file(f"{run_dir}/results.jsonl").decode().splitlines()
        if len(lines) != manifest["dataset"]["rows_judged"]:
            raise AssertionError(f"{latest['run_id']}: {len(lines)} result lines")
        self.seen.append(latest["run_id"])


def test_a_reader_polling_latest_never_sees_a_half_published_run(s3):
    # Slow every upload a little so the reader gets many looks in the middle of each publish.
    s3.fail(r"/evals/rag/", status=0, delay_seconds=0.05, methods=frozenset({"PUT"}))
    with LatestReader(s3, f"{s3.name}/evals/rag") as reader:
        for i in range(4):
            _run(_params(s3, rows=ROWS[: 3 + i], data=None, run_id=f"r{i}"))
    assert reader.problems == []
    assert len(reader.seen) > 10 and set(reader.seen) <= {f"r{i}" for i in range(4)}
    assert len(set(reader.seen)) >= 2  # the reader did see latest.json move between runs
    assert _read_json(reader.fs, reader.latest_path)["run_id"] == "r3"


def test_the_reader_catches_latest_published_before_its_run(s3):
    # The control: the same reader against a publisher that moves latest.json first.
    location = RunLocation(s3.url("evals"), "rag", "early", s3.storage_options)
    publisher = outputs.Publisher(location)
    s3.fail(r"/evals/rag/", status=0, delay_seconds=0.2, methods=frozenset({"PUT"}))
    with LatestReader(s3, f"{s3.name}/evals/rag") as reader:
        publisher.write_json(location.latest_path, {"run_id": "early",
                                                    "manifest": location.url("manifest.json")})
        publisher.write_run_file("results.jsonl", lambda handle: handle.write(b"{}\n"))
        publisher.write_json(f"{location.run_dir}/manifest.json",
                             {"files": ["results.jsonl"], "dataset": {"rows_judged": 1}})
        time.sleep(0.3)
    assert reader.problems and "FileNotFoundError" in reader.problems[0]
    assert reader.seen and set(reader.seen) == {"early"}


def test_the_reply_cache_on_s3_makes_a_rerun_free(s3, fake_llm):
    fake_llm.script = lambda body: Reply(content='{"rationale": "fine", "rating": "yes"}')
    judge = JudgeModel(model="openai/fake-judge", api_base=fake_llm.api_base, max_attempts=2,
                       backoff_seconds=0.05)
    params = _params(s3, rows=ROWS, data=None, judge=judge, use_cache=True,
                     cache=s3.url("cache"), judges=["correctness", "safety"])
    _run(params)
    first_calls = len(fake_llm.requests)
    cache_requests = [r for r in s3.requests() if "/cache/" in r.path]
    assert first_calls == 2 * len(ROWS), cache_requests
    _run(params.model_copy(update={"run_id": "run2"}))
    assert len(fake_llm.requests) == first_calls, s3.requests()  # every reply from the bucket

    fs = s3.filesystem()
    assert len(fs.find(f"{s3.name}/cache")) == first_calls
    usage = [_read_json(fs, f"{s3.name}/evals/rag/{run}/manifest.json")["usage"]
             for run in ("run1", "run2")]
    assert usage[0]["calls"] == first_calls and usage[0]["cache_hits"] == 0
    assert usage[1]["calls"] == 0 and usage[1]["cache_hits"] == first_calls
    metrics = [_read_json(fs, f"{s3.name}/evals/rag/{run}/metrics.json")
               for run in ("run1", "run2")]
    # the same figures; only the cost ledger differs: the rerun made no call and cost nothing
    judged = [{k: v for k, v in m.items() if not k.startswith("cost/")} for m in metrics]
    assert judged[0] == judged[1] and (metrics[1]["cost/calls"], metrics[1]["cost/usd"]) == (0, 0.0)


UNSAFE_NAMES = ["../x", "..", "a/b", "/etc", "/abs/path", "x/../../y", ".", ".hidden", "a\\b",
                "", "s3://other/bucket", "a b", "~", "x" * 200]


@pytest.mark.parametrize("field", ["suite", "run_id"])
@pytest.mark.parametrize("name", UNSAFE_NAMES)
def test_names_that_could_leave_the_prefix_are_refused(s3, field, name):
    with pytest.raises(ValidationError, match=field):
        _params(s3, **{field: name})
    assert [r for r in s3.requests() if r.method in ("PUT", "POST") and r.path.count("/") > 1] == []


@pytest.mark.parametrize("name", ["..", "../x", "a/b", "/abs", ".", "", "a\\b"])
def test_the_publisher_refuses_unsafe_names_too(s3, name):
    # The flows validate their parameters; the writer does not rely on it.
    with pytest.raises(ValueError, match="run_id"):
        RunLocation(s3.url("evals"), "rag", name, s3.storage_options)
    with pytest.raises(ValueError, match="suite"):
        RunLocation(s3.url("evals"), name, "run1", s3.storage_options)


def test_a_producer_is_run_once_and_a_failed_producer_writes_nothing(s3):
    location = RunLocation(s3.url("evals"), "rag", "run1",
                           {**s3.storage_options, **FEW_BOTO_RETRIES})
    publisher = outputs.Publisher(location)
    calls = []

    def produce(handle):
        calls.append(1)
        handle.write(b"half of it")
        raise RuntimeError("the producer broke")

    with pytest.raises(PublishError, match="results.jsonl"):
        publisher.write_run_file("results.jsonl", produce)
    assert calls == [1]
    assert not s3.filesystem().exists(f"{s3.name}/evals/rag/run1/results.jsonl")
    s3.fail(r"/run1/metrics\.json$", times=2)  # both of botocore's tries in the first attempt

    def rows(handle):
        calls.append(2)
        for i in range(3):
            handle.write(f"{i}\n".encode())

    publisher.write_run_file("metrics.json", rows)
    assert calls == [1, 2]  # retried uploads reuse what the producer wrote
    assert s3.filesystem().cat_file(f"{s3.name}/evals/rag/run1/metrics.json") == b"0\n1\n2\n"


def test_local_output_is_published_the_same_way(tmp_path):
    _run(EvaluateParams(data=str(RAG_EVAL), judge=JudgeModel(model="judgeflow/offline"),
                        output=f"file://{tmp_path}/out", suite="rag", run_id="run1",
                        use_cache=False))
    run_dir = tmp_path / "out" / "rag" / "run1"
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(RUN_FILES)  # no temp files left
    assert json.loads((tmp_path / "out" / "rag" / "latest.json").read_text())["run_id"] == "run1"



def test_cli_publishes_to_s3_with_an_endpoint_option(s3):
    """`--output s3://… --storage-option endpoint_url=…` as a MinIO user would type it."""
    from typer.testing import CliRunner

    from flows.cli import app

    result = CliRunner().invoke(app, [
        "evaluate", str(RAG_EVAL), "--judge-model", "judgeflow/offline",
        "--output", s3.url("cli"), "--suite", "cli", "--run-id", "c1",
        "--storage-option", f"endpoint_url={s3.server.endpoint_url}",
    ])
    assert result.exit_code == 0, result.output
    assert s3.keys_written()[-6:] == ["cli/cli/c1/manifest.json", "cli/cli/latest.json",
                                      "cli/cli/baseline.json", "cli/cli/history/c1.json",
                                      "cli/cli/history.json", "cli/cli/index.html"]


def test_a_failed_republish_of_a_run_id_leaves_no_old_manifest(s3):
    fs = s3.filesystem()
    _run(_params(s3, run_id="again"))
    assert fs.exists(f"{s3.name}/evals/rag/again/manifest.json")
    s3.fail(r"/evals/rag/again/report\.html$")
    with pytest.raises(PublishError):
        _run(_params(s3, run_id="again",
                     storage_options={**s3.storage_options, **FEW_BOTO_RETRIES}))
    # new data files sit there now: the old manifest must not vouch for them
    assert not fs.exists(f"{s3.name}/evals/rag/again/manifest.json")


def test_the_report_link_is_presigned_and_opens_the_report(s3, monkeypatch):
    import httpx

    from tasks.publish import LINK_EXPIRY_ENV

    monkeypatch.setenv(LINK_EXPIRY_ENV, "3600")
    result = _run(_params(s3, run_id="linked"))
    link = result["files"]["report_link"]
    assert "X-Amz-Expires=3600" in link and "X-Amz-Signature=" in link
    # An anonymous browser (no AWS credentials, no s3fs) gets the page itself.
    page = httpx.get(link, timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.content == s3.filesystem().cat_file(f"{s3.name}/evals/rag/linked/report.html")
    assert httpx.get(link.split("?", 1)[0], timeout=30).status_code == 403  # unsigned: refused
