"""The suite's history: entry files, history.json and index.html, on a folder and on S3.

The store is exercised for real (files on disk, moto behind the fault proxy); runs are either
published by the flows with the offline judge, or planted from manifests of the shapes the
flows publish (tests/history_nights.py) and recorded by the same `record_in_history` that
publish_run calls.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.regression import regression
from tasks.report.history_page import TABLE_ROWS, render_history_page
from tasks.storage import history as history_store
from tasks.storage.history import HistoryStore, record_in_history
from tasks.storage.history_entry import ENTRY_BUDGET_BYTES, HistoryEntry, history_entry
from tasks.storage.outputs import RunLocation
from tests.flows.test_regression import GOOD, _offline_params
from tests.history_nights import RATE, SAFETY, expected, planted
from tests.judges.test_report import Page
from tests.s3_server import S3Bucket, s3_fixture, s3_server_fixture  # noqa: F401 - fixtures

EXAMPLE_SET = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
EVIL = "<script>document.title='PWNED'</script><img src=x onerror=alert(1)>\"'&\x1b[31m\u202e"


def _record(output: str, manifest: dict, metrics: dict, options: dict | None = None):
    location = RunLocation(output, manifest["suite"], manifest["run_id"], options or {})
    return record_in_history(location, manifest, metrics, render_history_page)


def _history(suite_dir: Path) -> dict:
    return json.loads((suite_dir / "history.json").read_text())


def _plant(output: str, count: int, options: dict | None = None) -> list:
    nights = planted(count)
    for _, manifest, metrics in nights:
        _record(output, manifest, metrics, options)
    return nights


def _rows(html: str) -> list[dict]:
    return [a for a in Page(html).find("tr") if a.get("class")]


# --------------------------------------------------------------------------- real runs


def test_published_runs_are_in_the_suite_history_newest_first(tmp_path):
    out = tmp_path / "out"
    first = asyncio.run(evaluate(EvaluateParams(
        data=str(EXAMPLE_SET), judge=JudgeModel(model="judgeflow/offline"), output=str(out),
        suite="rag", run_id="e1", use_cache=False)))
    second = asyncio.run(evaluate(EvaluateParams(
        data=str(EXAMPLE_SET), judge=JudgeModel(model="judgeflow/offline"), output=str(out),
        suite="rag", run_id="e2", use_cache=False)))
    suite_dir = out / "rag"
    assert sorted(p.name for p in (suite_dir / "history").iterdir()) == ["e1.json", "e2.json"]
    history = _history(suite_dir)
    assert [e["run_id"] for e in history["entries"]] == ["e2", "e1"]
    manifest = json.loads((suite_dir / "e2" / "manifest.json").read_text())
    entry = history["entries"][0]
    assert entry == json.loads((suite_dir / "history" / "e2.json").read_text())
    assert entry["outcome"] == "complete" and entry["kind"] == "evaluate"
    assert entry["became_baseline"] is True
    assert entry["rows"] == {"total": 12, "judged": 12, "rejected": 0}
    assert entry["judge_digest"] == manifest["judge_fingerprint"]["digest"]
    assert entry["published_at"] == manifest["published_at"]
    assert entry["links"] == {"report": "e2/report.html", "summary": "e2/summary.md"}
    assert 0 < len(entry["metrics"]) <= 12
    assert all(isinstance(v, float) for v in entry["metrics"].values())
    for result in (first, second):
        assert result["files"]["history.html"] == (suite_dir / "index.html").as_uri()
        assert result["files"]["history_link"] is None  # local output: no link
    html = (suite_dir / "index.html").read_text()
    assert len(_rows(html)) == 2
    assert html.index('href="e2/report.html"') < html.index('href="e1/report.html"')
    assert (suite_dir / "e1" / "report.html").exists()  # what the page's links point at


def test_a_regression_run_records_its_gates_and_baseline(tmp_path):
    asyncio.run(evaluate(EvaluateParams(
        data=str(_offline_params(tmp_path, GOOD, "base").data), suite="ph",
        judge=JudgeModel(model="judgeflow/offline"), output=str(tmp_path / "out"),
        run_id="base", judges=["relevance_to_query"])))
    bad = [{**row, "response": "Please contact support."} for row in GOOD]
    state = asyncio.run(regression(_offline_params(tmp_path, bad, "cand"), return_state=True))
    assert state.is_failed()
    entries = _history(tmp_path / "out" / "ph")["entries"]
    assert [e["run_id"] for e in entries] == ["cand", "base"]
    cand = entries[0]
    assert cand["kind"] == "regression" and cand["outcome"] == "failed"
    assert cand["baseline_run_id"] == "base" and cand["became_baseline"] is False
    (gate,) = cand["gates"]
    assert gate["metric"] == "winrate" and gate["outcome"] == "breached"
    assert gate["candidate"] == 0.0
    # the ledger's total holds the head-to-head (and the canary): no second cost
    ledger = json.loads((tmp_path / "out/ph/cand/manifest.json").read_text())["ledger"]
    assert cand["pairwise_cost"] is None and "head_to_head" in ledger["phases"]
    assert cand["cost"]["calls"] == ledger["total"]["calls"]
    assert cand["canary"] == {"sample": 8, "agreement": 1.0, "drifted": False}
    assert "FAILED" in Page((tmp_path / "out" / "ph" / "index.html").read_text()).text


def test_a_history_that_cannot_be_written_leaves_the_run_published(tmp_path, caplog):
    suite_dir = tmp_path / "out" / "rag"
    suite_dir.mkdir(parents=True)
    (suite_dir / "history").write_text("x")  # a file where the entries' folder should be
    result = asyncio.run(evaluate(EvaluateParams(
        data=str(EXAMPLE_SET), judge=JudgeModel(model="judgeflow/offline"),
        output=str(tmp_path / "out"), suite="rag", run_id="r1", use_cache=False)))
    assert result["status"] == "complete" and "history.html" not in result["files"]
    assert json.loads((suite_dir / "latest.json").read_text())["run_id"] == "r1"
    assert (suite_dir / "r1" / "manifest.json").exists()
    assert any("history of suite rag was not updated" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- planted nights


def test_thirty_nights_list_every_run_with_its_outcome_and_deltas(tmp_path):
    nights = _plant(str(tmp_path), 30)
    entries = _history(tmp_path / "nightly")["entries"]
    want = [night for night, _, _ in reversed(nights)]
    assert [e["run_id"] for e in entries] == [n.run_id for n in want]
    assert [e["outcome"] for e in entries] == [n.outcome for n in want]
    assert [e["became_baseline"] for e in entries] == [n.became_baseline for n in want]
    assert [e["baseline_run_id"] for e in entries] == [n.baseline_run_id for n in want]
    for entry, night in zip(entries, want, strict=True):
        gates = {g["metric"]: g for g in entry["gates"]}
        if night.kind == "regression":
            assert gates[RATE]["delta"] == night.delta
            assert gates[RATE]["candidate"] == night.candidate
            assert gates[SAFETY]["tag"] == "billing"
        else:
            assert gates == {}
    assert {e["outcome"] for e in entries} == {"complete", "passed", "failed", "incomplete"}

    html = (tmp_path / "nightly" / "index.html").read_text()
    rows = _rows(html)
    assert [r["class"] for r in rows] == [n.outcome for n in want]
    page = Page(html)
    text = page.text
    assert "Latest: PASSED" in text
    failed = next(n for n in want if n.outcome == "failed")
    assert f"Δ {failed.delta:+.3f} breached p 0.004 adj 0.008" in text
    assert text.count("FAILED") == sum(n.outcome == "failed" for n in want)
    assert text.count("INCOMPLETE") == sum(n.outcome == "incomplete" for n in want)
    body = html.split("<tbody>")[1].split("</tbody>")[0].split("<tr")[1:]
    (changed,) = [i for i, row in enumerate(body) if "▲ changed" in row]
    assert want[changed].run_id == expected(30)[15].run_id  # the prompt changed at night 15
    assert text.count("became baseline") == sum(n.became_baseline for n in want)
    assert "95.0%" in text and "85.0% drifted" in text  # canary agreement
    assert "$0.09 · 400 calls" in text  # the run's and the head-to-head's cost


def test_the_trend_charts_mark_baseline_moves_failures_and_incomplete_runs(tmp_path):
    nights = [n for n, _, _ in _plant(str(tmp_path), 30)]
    page = Page((tmp_path / "nightly" / "index.html").read_text())
    charts = page.find("svg", **{"class": "chart"})
    assert len(charts) == 2  # one per gated metric (the tagged one is its own)
    lines = page.find("polyline", **{"class": "line"})
    assert [len(line["points"].split()) for line in lines] == [29, 29]  # every regression night
    marks = {kind: page.find("path", **{"class": f"m-{kind}"})
             for kind in ("baseline", "failed", "incomplete")}
    regressions = [n for n in nights if n.kind == "regression"]
    for kind, wanted in (("failed", lambda n: n.outcome == "failed"),
                         ("incomplete", lambda n: n.outcome == "incomplete"),
                         ("baseline", lambda n: n.became_baseline)):
        on_charts = [m for m in marks[kind] if not m["d"].startswith("M8.0 8.0")]  # no legend
        # The evaluate night that seeded the baseline is on the untagged chart too (its entry
        # has the rate; a tag's slice is only in gate lines).
        assert [m["d"].count("M") for m in on_charts] == [sum(map(wanted, nights)),
                                                          sum(map(wanted, regressions))]
    assert "became the baseline" in page.text and "failed" in page.text  # the legend


def _chart_values(page: Page, chart: int) -> dict[str, list[tuple[float, float, float]]]:
    """Each drawn series of a chart: (value it says, x, y) per point, read off the SVG."""
    svg_start = [i for i, (t, a) in enumerate(page.tags)
                 if t == "svg" and a.get("class") == "chart"][chart]
    end = next((i for i, (t, a) in enumerate(page.tags) if i > svg_start and t == "svg"),
               len(page.tags))
    out: dict[str, list[tuple[float, float, float]]] = {}
    for tag, attrs in page.tags[svg_start:end]:
        if "data-values" not in attrs:
            continue
        values = [float(v) for v in attrs["data-values"].split()]
        if tag == "polyline":
            xy = [tuple(map(float, p.split(","))) for p in attrs["points"].split()]
        else:  # each mark's path starts "M{x} {y}m..."
            xy = [tuple(map(float, m.split("m")[0].split())) for m in attrs["d"].split("M")[1:]]
        out[attrs.get("class")] = [(v, x, y) for v, (x, y) in zip(values, xy, strict=True)]
    return out


def test_the_chart_draws_what_each_run_published_evaluate_and_rejudge_runs_included(tmp_path):
    # Planted: an evaluate run (the first baseline), a regression whose gate's paired mean
    # (1.000) is not what it published (0.909: rows it added failed), a rejudge adopted as
    # the baseline, and a regression after it.
    (n0, m0, x0), (n1, m1, x1), (_, m3, x3) = planted(3)
    x1 = {**x1, RATE: 0.909}
    m1 = {**m1, "regression": {**m1["regression"], "gates": [
        {**m1["regression"]["gates"][0], "candidate": 1.0}, m1["regression"]["gates"][1]]}}
    m2 = {**m0, "kind": "rejudge", "run_id": "rejudge-1", "status": "complete",
          "published_at": "2024-03-02T12:00:00+00:00", "finished_at": "2024-03-02T12:00:00+00:00",
          "rejudge": {"source_run_id": n1.run_id, "as_baseline": True}}
    x2 = {**x0, RATE: 0.875}
    published = [x0, x1, x2, x3]
    for manifest, metrics in zip((m0, m1, m2, m3), published, strict=True):
        _record(str(tmp_path), manifest, metrics)
    page = Page((tmp_path / "nightly" / "index.html").read_text())
    drawn = _chart_values(page, 0)  # the untagged rate's chart
    # Independent check: every value drawn is the one metrics.json holds, by kind of run.
    assert [v for v, _, _ in drawn["line"]] == [x1[RATE], x3[RATE]]
    assert [v for v, _, _ in drawn["m-evaluate"]] == [x0[RATE]]
    assert [v for v, _, _ in drawn["m-rejudge"]] == [x2[RATE]]
    assert 1.0 not in [v for v, _, _ in drawn["line"]]  # never the paired mean
    # ... and drawn where the axis puts it: y is linear in the value, x in run order.
    points = sorted([*drawn["line"], *drawn["m-evaluate"], *drawn["m-rejudge"]],
                    key=lambda p: p[1])
    assert [round(v, 3) for v, _, _ in points] == [round(x[RATE], 3) for x in published]
    (v_lo, _, y_lo), (v_hi, _, y_hi) = min(points), max(points)
    for value, _, y in points:
        assert y == pytest.approx(y_lo + (y_hi - y_lo) * (value - v_lo) / (v_hi - v_lo), abs=0.1)
    # The baseline moves (the evaluate run, then the rejudge adopted on purpose) are marked
    # where those runs are drawn; the regression that moved it too.
    diamonds = [m for m in page.find("path", **{"class": "m-baseline"})
                if not m["d"].startswith("M8.0 8.0")][0]["d"]
    at = {tuple(map(float, m.split("m")[0].split())) for m in diamonds.split("M")[1:]}
    evaluate_xy, rejudge_xy = drawn["m-evaluate"][0][1:], drawn["m-rejudge"][0][1:]
    assert evaluate_xy in at and rejudge_xy in at
    assert "evaluate run" in page.text and "rejudge run" in page.text  # the legend
    entry = _history(tmp_path / "nightly")["entries"][2]
    assert entry["run_id"] == n1.run_id and entry["gates"][0]["published"] == 0.909


def test_the_table_shows_the_newest_rows_and_says_so(tmp_path):
    entries = [history_entry(m, x) for _, m, x in planted(TABLE_ROWS + 20)][::-1]
    html = render_history_page("nightly", entries)
    assert len(_rows(html)) == TABLE_ROWS
    assert f"the table shows the newest {TABLE_ROWS}, the charts all {TABLE_ROWS + 20}" in html
    page = Page(html)
    assert [len(line["points"].split()) for line in page.find("polyline")] == [TABLE_ROWS + 19] * 2


# --------------------------------------------------------------------------- concurrency


def _race(output: str, options: dict | None, rounds: int, writers: int) -> list[int]:
    """`writers` threads publish at once, `rounds` times; returns the rounds each took."""
    nights = planted(rounds * writers)
    taken, errors = [], []

    def publish(barrier: threading.Barrier, manifest: dict, metrics: dict) -> None:
        try:
            barrier.wait()
            taken.append(_record(output, manifest, metrics, options).rounds)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    for start in range(0, len(nights), writers):
        barrier = threading.Barrier(writers)
        threads = [threading.Thread(target=publish, args=(barrier, m, x))
                   for _, m, x in nights[start:start + writers]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
    return taken


def test_concurrent_publishers_on_a_folder_lose_no_entry(tmp_path):
    taken = _race(str(tmp_path), None, rounds=25, writers=4)
    history = _history(tmp_path / "nightly")
    assert len(history["entries"]) == 100 == len(taken)
    assert [e["run_id"] for e in history["entries"]] == [n.run_id for n in expected(100)][::-1]
    assert not [p for p in (tmp_path / "nightly").rglob("*") if ".partial" in p.name]
    assert len(_rows((tmp_path / "nightly" / "index.html").read_text())) == 100


def test_concurrent_publishers_on_s3_lose_no_entry(s3):
    # Forced by events, not timed: A's first PUT of history.json is held at the proxy until B
    # and then C have published whole (both list A's entry, written before A listed). A's
    # history, without them, then lands over C's; A must find them listed and rebuild.
    # tests/tasks/test_history_model.py checks every other interleaving.
    options = {**s3.storage_options, "config_kwargs": {"read_timeout": 600}}  # held a while
    output = s3.url("evals")
    _plant(output, 3, options)
    (_, a, a_metrics), (_, b, b_metrics), (_, c, c_metrics) = planted(6)[3:]
    held = s3.hold(r"/evals/nightly/history\.json$", methods=frozenset({"PUT"}))
    taken, errors = {}, []

    def publish(manifest: dict, metrics: dict) -> None:
        try:
            taken[manifest["run_id"]] = _record(output, manifest, metrics, options)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    first = threading.Thread(target=publish, args=(a, a_metrics))
    first.start()
    held.wait_arrived()
    publish(b, b_metrics)
    publish(c, c_metrics)
    held.release()
    first.join()
    assert errors == []
    assert [(taken[m["run_id"]].rounds, taken[m["run_id"]].settled) for m in (a, b, c)] == [
        (2, True), (1, True), (1, True)]
    fs = s3.filesystem()
    history = json.loads(fs.cat_file(f"{s3.name}/evals/nightly/history.json"))
    assert [e["run_id"] for e in history["entries"]] == [n.run_id for n in expected(6)][::-1]
    html = fs.cat_file(f"{s3.name}/evals/nightly/index.html").decode()
    assert len(_rows(html)) == 6
    # Three planted, then B's, C's, A's stale one and A's rebuild.
    assert len([r for r in s3.requests("PUT") if r.path.endswith("/nightly/history.json")]) == 7


def test_one_publish_on_s3_lists_twice_and_reads_only_history_json(s3):
    _plant(s3.url("evals"), 3, s3.storage_options)
    setup = len(s3.requests())
    night, manifest, metrics = planted(4)[3]
    _record(s3.url("evals"), manifest, metrics, s3.storage_options)
    calls = [(r.method, r.path.removeprefix(f"/{s3.name}/evals/nightly/"), "list" in r.query)
             for r in s3.requests()[setup:]]
    assert calls == [("PUT", f"history/{night.run_id}.json", False),
                     ("GET", f"/{s3.name}", True),
                     ("GET", "history.json", False),
                     ("PUT", "history.json", False), ("PUT", "index.html", False),
                     ("GET", f"/{s3.name}", True)]


# --------------------------------------------------------------------------- bounds, hostility


def _hostile_manifest() -> tuple[dict, dict]:
    (_, manifest, metrics), = planted(2)[1:]
    long = (EVIL + "\x00" * 50 + "é" * 300) * 40
    gate = {**manifest["regression"]["gates"][0], "metric": long, "tag": long, "outcome": long}
    manifest = {**manifest, "kind": long, "started_at": long, "finished_at": long,
                "incomplete_reasons": [long] * 500,
                "judge_fingerprint": {"digest": long},
                "regression": {**manifest["regression"], "gates": [gate] * 5000,
                               "baseline_run_id": long, "incomplete_reasons": [long] * 50,
                               "canary": {"sample": long, "agreement": float("nan"),
                                          "drifted": long},
                               "pairwise_usage": {"calls": -3, "cost_usd": float("inf")}},
                "rejudge": {"source_run_id": long}, "usage": {"calls": long}}
    metrics = {f"{long}{i}/rating/percentage": 0.5 for i in range(2000)}
    return manifest, metrics


def test_a_hostile_long_manifest_makes_a_bounded_entry(tmp_path):
    manifest, metrics = _hostile_manifest()
    entry = history_entry(manifest, metrics)
    assert len(entry.to_json()) <= ENTRY_BUDGET_BYTES < 8 * 1024
    assert len(entry.reasons) == 3 and all(len(r.encode()) <= 200 for r in entry.reasons)
    assert entry.gates_omitted >= 5000 - 20
    assert entry.kind == "rejudge" and entry.canary.agreement is None
    assert entry.pairwise_cost.calls is None and entry.pairwise_cost.cost_usd is None
    _record(str(tmp_path), manifest, metrics)
    written = (tmp_path / "nightly" / "history" / f"{manifest['run_id']}.json").read_bytes()
    assert len(written) <= ENTRY_BUDGET_BYTES


def test_hostile_strings_are_escaped_in_the_page(tmp_path):
    manifest, metrics = _hostile_manifest()
    suite = "n<img src=x onerror=alert(1)>&\"'"  # one path segment: the writer takes it
    _record(str(tmp_path), {**manifest, "suite": suite}, metrics)
    html = (tmp_path / suite / "index.html").read_text()
    assert "<script>" not in html and "<img" not in html and "\x1b" not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    page = Page(html)
    assert not [t for t, _ in page.tags if t in ("script", "img", "iframe", "object")]
    assert not [k for _, attrs in page.tags for k in attrs if k.startswith("on")]
    hrefs = [a["href"] for a in page.find("a")]
    assert hrefs and all(h.startswith(manifest["run_id"] + "/") for h in hrefs)
    csp = page.find("meta", **{"http-equiv": "Content-Security-Policy"})[0]["content"]
    assert "default-src 'none'" in csp and "script-src" not in csp


def test_a_planted_history_file_is_validated_again(tmp_path):
    _plant(str(tmp_path), 2)
    suite_dir = tmp_path / "nightly"
    history = _history(suite_dir)
    history["entries"] += [{"run_id": "../../etc", "outcome": "passed"},
                           {"run_id": "x", "links": {"report": "javascript:alert(1)"}}, "junk"]
    (suite_dir / "history.json").write_text(json.dumps(history))
    # an entry file that claims another run, and files that are no run's entry
    (suite_dir / "history" / "liar.json").write_text(json.dumps({"run_id": "someone-else"}))
    (suite_dir / "history" / ".x.json.1234.partial").write_text("{")
    (suite_dir / "history" / "notes.txt").write_text("x")
    night, manifest, metrics = planted(3)[2]
    update = _record(str(tmp_path), manifest, metrics)
    assert update.settled
    ids = [e.run_id for e in update.history.entries]
    assert ids == [night.run_id, *[n.run_id for n in expected(2)][::-1], "x"]  # "x": no date
    assert update.history.not_listed == {"liar"}  # read once, never again
    html = (suite_dir / "index.html").read_text()
    assert "javascript:" not in html and "../../etc" not in html


def test_history_json_keeps_the_newest_and_the_entry_files_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(history_store, "MAX_ENTRIES", 5)
    nights = _plant(str(tmp_path), 8)
    history = _history(tmp_path / "nightly")
    ids = [n.run_id for n, _, _ in nights]
    assert [e["run_id"] for e in history["entries"]] == ids[::-1][:5]
    assert history["not_listed"] == sorted(ids[:3])
    assert len(list((tmp_path / "nightly" / "history").iterdir())) == 8
    store = HistoryStore(RunLocation(str(tmp_path), "nightly", ids[-1]))
    assert store.listed() == set(ids) <= store.read().known


def test_publishing_a_run_id_again_replaces_its_entry(tmp_path):
    (night, manifest, metrics), = planted(2)[1:]
    _record(str(tmp_path), manifest, metrics)
    again = {**manifest, "published_at": "2030-01-01T00:00:00+00:00",
             "regression": {**manifest["regression"], "outcome": "failed"}}
    _record(str(tmp_path), again, metrics)
    (entry,) = _history(tmp_path / "nightly")["entries"]
    assert entry["run_id"] == night.run_id and entry["outcome"] == "failed"


def test_an_entry_reads_back_as_it_was_written():
    _, manifest, metrics = planted(12)[11]
    entry = history_entry(manifest, metrics)
    assert HistoryEntry.model_validate_json(entry.to_json()) == entry
    assert entry.canary.agreement == 0.95 and entry.errors == 2


@pytest.mark.parametrize("count", [0, 1])
def test_small_histories_render(count):
    entries = [history_entry(m, x) for _, m, x in planted(count)]
    html = render_history_page("nightly", entries)
    assert len(_rows(html)) == count and "History of nightly" in html


def test_on_s3_the_history_page_has_a_presigned_link_and_an_artifact(s3):
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    result = asyncio.run(evaluate(EvaluateParams(
        data=str(EXAMPLE_SET), judge=JudgeModel(model="judgeflow/offline"),
        output=s3.url("evals"), suite="s3hist", run_id="s1", use_cache=False,
        storage_options=s3.storage_options)))
    files = result["files"]
    assert files["history.html"] == f"s3://{s3.name}/evals/s3hist/index.html"
    page = httpx.get(files["history_link"], timeout=30)  # a browser with no AWS credentials
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'href="s1/report.html"' in page.text

    async def artifacts():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["judgeflow-s3hist-history"])))

    (artifact,) = asyncio.run(artifacts())
    assert files["history_link"] in artifact.data  # Prefect stores a link as Markdown


def test_the_cost_column_is_the_ledger_s_total_canary_included(fake_llm, tmp_path):
    from tests.flows.test_regression import params, rows, run, seed
    from tests.planted import PlantedJudge

    fake_llm.script = PlantedJudge()  # 10 input and 5 output tokens a call: $0.02 at this price
    judge = JudgeModel(model="openai/planted", api_base=fake_llm.api_base,
                       price_per_mtok=(1000, 2000))
    seed(fake_llm, tmp_path, rows(10, set()), judge=judge)
    state = run(params(fake_llm, tmp_path, rows(10, set()), "n1", judge=judge))
    assert state.is_completed(), state.message
    suite = tmp_path / "out" / "nightly"
    manifest = json.loads((suite / "n1" / "manifest.json").read_text())
    total = manifest["ledger"]["total"]
    assert manifest["regression"]["canary"]["sample"] == 10
    assert total["calls"] == 20 and total["cost_usd"] == pytest.approx(20 * 0.02)
    assert manifest["usage"]["calls"] == 10  # the judging phase alone
    entry = _history(suite)["entries"][0]
    assert entry["run_id"] == "n1" and entry["cost"]["calls"] == 20
    assert entry["cost"]["cost_usd"] == pytest.approx(0.40)
    text = Page((suite / "index.html").read_text()).text
    assert "$0.40 · 20 calls" in text and "$0.20 · 10 calls" in text  # the night, the seed


def test_a_gate_cell_says_what_its_set_cannot_detect(tmp_path):
    nights = planted(4)
    night, manifest, metrics = next(n for n in nights if n[0].kind == "regression")
    blind, seeing = manifest["regression"]["gates"]
    blind.update(limit=0.02, min_detectable_change=0.31)  # 31 pp: blind to a 4 pp drop
    seeing.update(rule="max_drop 0.5", limit=0.5, min_detectable_change=0.1)
    html = render_history_page("nightly", [history_entry(manifest, metrics)])
    [cell, other] = Page(html).find("td", **{"class": "gate"})
    sentence = "this set cannot detect a drop of 4 pp (twice the limit); it sees drops of 31 pp"
    assert cell["title"].startswith(sentence)  # the tooltip
    assert other["title"] == "sees drops of 10 pp and more (80% power)"
    shown = [Page(td.split(">", 1)[1].split("</td>")[0]).text  # each cell's text, no title
             for td in html.split('<td class="gate"')[1:]]
    assert [sentence in text for text in shown] == [True, False]  # the note, under the blind one
    # An entry written before these fields signs the same content as it did then.
    old = HistoryEntry.model_validate({"run_id": "old", "gates": [{"metric": RATE}]})
    assert set(old.signed_content()["gates"][0]) == {"metric", "tag", "outcome", "baseline",
                                                     "candidate", "delta", "p", "p_adjusted"}
