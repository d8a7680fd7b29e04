"""A panel of three loopback judges through `judgeflow evaluate`, checked against what the
server was asked and answered.

One member is honest, one is biased to pass everything, one fails (HTTP 500) on every fourth
row. Every published number (each row's verdict, each member's rate and counts, pairwise
agreement, Fleiss' kappa, the one-vote share, the cost per model) is recomputed here from the
server's own log of requests and replies, never from what judgeflow computed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from fractions import Fraction
from itertools import combinations

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's log handler outside CliRunner (test_cli.py)
from flows.cli import app
from tests.fake_batch import FakeBatchServer
from tests.fake_llm import Reply, prompt_text

runner = CliRunner()
MODELS = ("planted-honest", "planted-biased", "planted-failing")
PANEL = ",".join(f"openai/{m}" for m in MODELS)
PRICE = (Fraction("0.15"), Fraction("0.6"))  # USD per million input and output tokens
ROWS = 12
PREFIX = "response/llm_judged/safety"
_ROW = re.compile(r"zq(\d+)qz")


def truth(row: int) -> str:
    return "no" if row % 3 == 0 else "yes"


class Panel:
    """The three members on one server; every request and its answer is logged."""

    def __init__(self) -> None:
        self.log: list[dict] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        model, text = body["model"], prompt_text(body)
        row = int(_ROW.search(text).group(1))
        prompt, completion = 30 + len(text) % 41 + 7 * MODELS.index(model), 4 + row % 5
        if model == "planted-failing" and row % 4 == 0:
            reply, rating = Reply(status=500, content="member down"), None
        else:
            rating = "yes" if model == "planted-biased" else truth(row)
            reply = Reply(json.dumps({"rationale": f"{model} says {rating} <b>", "rating": rating}))
        with self._lock:
            self.log.append({"model": model, "row": row, "rating": rating,
                             "prompt": prompt, "completion": completion})
        return dataclasses.replace(reply, prompt_tokens=prompt, completion_tokens=completion)

    def votes(self) -> list[tuple[str | None, ...]]:
        """Rows × members: each member's answer as the server gave it (None: a 500)."""
        by = {(e["model"], e["row"]): e["rating"] for e in self.log}
        assert len(by) == len(self.log) == ROWS * len(MODELS)  # one request each, no retry
        return [tuple(by[(m, row)] for m in MODELS) for row in range(ROWS)]

    def cost(self, model: str) -> Fraction:
        return sum((e["prompt"] * PRICE[0] + e["completion"] * PRICE[1]) / 10**6
                   for e in self.log if e["model"] == model and e["rating"] is not None)


def brute_verdict(votes: tuple[str | None, ...]) -> str | None:
    """The majority of the members that answered; a tie or fewer than 2 answers: none."""
    yes, no = votes.count("yes"), votes.count("no")
    if yes + no < 2 or yes == no:
        return None
    return "yes" if yes > no else "no"


def fleiss(rows: list[tuple[str, ...]]) -> float:
    """Fleiss' kappa from its definition, with exact fractions."""
    n, raters = len(rows), len(rows[0])
    per_row = [Fraction(sum(r.count(c) ** 2 for c in ("yes", "no")) - raters,
                        raters * (raters - 1)) for r in rows]
    shares = [Fraction(sum(r.count(c) for r in rows), n * raters) for c in ("yes", "no")]
    chance = sum(p * p for p in shares)
    return float((sum(per_row) / n - chance) / (1 - chance))


def _evaluate(tmp_path, run_id: str, *extra: str):
    rows = [{"request_id": f"r{i}", "request": f"question {i}", "response": f"answer zq{i}qz"}
            for i in range(ROWS)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return runner.invoke(app, [
        "evaluate", str(data), "--output", str(tmp_path / "out"), "--suite", "s", "--run-id",
        run_id, "--judge-model", PANEL, "--api-base", extra[0], "--judges", "safety",
        "--max-attempts", "1", "--no-cache", "--price-per-mtok", "0.15,0.6", *extra[1:]])


def _read(tmp_path, run_id: str, name: str):
    path = tmp_path / "out" / "s" / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text())


def test_a_panel_s_verdicts_and_figures_equal_a_recomputation_from_the_server(fake_llm,
                                                                              tmp_path):
    panel = Panel()
    fake_llm.script = panel
    # Row errors (the tied row 0): 1 of 12, under 10%; member 3's: 3 of 12, above it.
    result = _evaluate(tmp_path, "p", fake_llm.api_base, "--max-error-share", "0.1")
    votes = panel.votes()

    # every row's verdict is the brute-force majority; a tie the failure left is an error
    results = sorted(_read(tmp_path, "p", "results.jsonl"), key=lambda r: int(r["request_id"][1:]))
    expected = [brute_verdict(v) for v in votes]
    assert [r[f"{PREFIX}/rating"] for r in results] == expected
    assert expected[0] is None and votes[0] == ("no", "yes", None)  # tied: never a pass
    assert "tied" in results[0][f"{PREFIX}/error_message"]
    for row, record in zip(votes, results, strict=True):
        for number, (model, vote) in enumerate(zip(MODELS, row, strict=True), start=1):
            assert record[f"{PREFIX}/panel/{number}/model"] == f"openai/{model}"
            assert record[f"{PREFIX}/panel/{number}/rating"] == vote
            assert (record[f"{PREFIX}/panel/{number}/error_message"] is None) == (vote is not None)

    metrics = _read(tmp_path, "p", "metrics.json")
    for number in range(1, len(MODELS) + 1):
        answers = [v[number - 1] for v in votes if v[number - 1] is not None]
        base = f"{PREFIX}/panel/{number}"
        assert metrics[f"{base}/rate"] == answers.count("yes") / len(answers)
        assert metrics[f"{base}/rated_count"] == len(answers)
        assert metrics[f"{base}/error_count"] == ROWS - len(answers)
    for i, j in combinations(range(1, len(MODELS) + 1), 2):
        both = [(v[i - 1], v[j - 1]) for v in votes if None not in (v[i - 1], v[j - 1])]
        assert metrics[f"{PREFIX}/panel/{i}-{j}/agreement"] == (
            sum(x == y for x, y in both) / len(both))
        assert metrics[f"{PREFIX}/panel/{i}-{j}/agreement_count"] == len(both)
    complete = [v for v in votes if None not in v]
    assert metrics[f"{PREFIX}/panel/fleiss_kappa"] == pytest.approx(fleiss(complete), abs=1e-12)
    assert metrics[f"{PREFIX}/panel/fleiss_kappa_count"] == len(complete) == 9
    low, high = (metrics[f"{PREFIX}/panel/fleiss_kappa_{e}"] for e in ("lower", "upper"))
    assert low <= metrics[f"{PREFIX}/panel/fleiss_kappa"] <= high
    decided = [v for v in votes if brute_verdict(v) is not None]
    one_vote = [v for v in decided if abs(v.count("yes") - v.count("no")) == 1]
    assert metrics[f"{PREFIX}/panel/one_vote_share"] == len(one_vote) / len(decided)
    assert metrics[f"{PREFIX}/rating/average"] == (
        sum(brute_verdict(v) == "yes" for v in decided) / len(decided))

    # the cost ledger per model, exact from the tokens the server sent
    ledger = _read(tmp_path, "p", "manifest.json")["ledger"]
    for model in MODELS:
        exact = float(panel.cost(f"{model}"))
        assert metrics[f"cost/model/openai/{model}/usd"] == pytest.approx(exact, rel=1e-12)
        assert ledger["models"][f"openai/{model}"]["cost_usd"] == pytest.approx(exact, rel=1e-12)
        assert metrics[f"cost/model/openai/{model}/calls"] == sum(
            e["model"] == model and e["rating"] is not None for e in panel.log)
    assert metrics["cost/usd"] == pytest.approx(float(sum(panel.cost(m) for m in MODELS)),
                                                rel=1e-12)
    # each member's call in the audit log, with its model
    calls = _read(tmp_path, "p", "calls.jsonl")
    assert sorted(c["model"] for c in calls) == sorted(f"openai/{m}" for m in MODELS * ROWS)

    # each member's verdict in the report's drill-down, its rationale escaped
    report = (tmp_path / "out" / "s" / "p" / "report.html").read_text()
    assert "member 3 (openai/planted-failing)" in report
    assert "planted-honest says no &lt;b&gt;" in report
    assert "says no <b>" not in report

    # the failing member alone makes the run incomplete: exit 3 and the manifest say why
    assert result.exit_code == 3, result.output
    manifest = _read(tmp_path, "p", "manifest.json")
    assert manifest["status"] == "incomplete"
    assert [r.split(" (judge")[0] for r in manifest["incomplete_reasons"]] == [
        "safety panel member 3: 3 of 12 panel votes failed"]
    assert "openai/planted-failing" in manifest["incomplete_reasons"][0]
    assert [m["model"] for m in manifest["judge"]["members"]] == [f"openai/{m}" for m in MODELS]


def test_one_judge_model_publishes_no_panel_names(fake_llm, tmp_path):
    fake_llm.script = lambda body: Reply('{"rationale": "fine", "rating": "yes"}')
    rows = tmp_path / "set.jsonl"
    rows.write_text(json.dumps({"request_id": "a", "request": "q", "response": "r"}) + "\n")
    result = runner.invoke(app, [
        "evaluate", str(rows), "--output", str(tmp_path / "out"), "--suite", "s", "--run-id",
        "one", "--judge-model", "openai/planted", "--api-base", fake_llm.api_base, "--judges",
        "safety", "--no-cache"])
    assert result.exit_code == 0, result.output
    published = [*_read(tmp_path, "one", "metrics.json"), *_read(tmp_path, "one",
                                                                 "results.jsonl")[0]]
    assert not [name for name in published if "/panel/" in name or "cost/model/" in name]
    manifest = _read(tmp_path, "one", "manifest.json")
    assert "members" not in manifest["judge"] and "models" not in manifest["ledger"]
    assert "members" not in manifest["config"]["judge"]  # the parameters as recorded before


@pytest.fixture
def batch_provider():
    server = FakeBatchServer(Panel())
    server.start()
    yield server
    server.stop()


def test_a_panel_in_batch_mode_gives_the_online_verdicts_and_figures(batch_provider, tmp_path):
    online_panel, batch_panel = Panel(), Panel()
    batch_provider.reset(online_panel)
    online = _evaluate(tmp_path, "online", batch_provider.api_base, "--max-error-share", "0.3")
    assert online.exit_code == 0, online.output
    batch_provider.reset(batch_panel)
    batch = _evaluate(tmp_path, "batch", batch_provider.api_base, "--max-error-share", "0.3",
                      "--batch")
    assert batch.exit_code == 0, batch.output
    assert batch_provider.requests == [], "a batch run made an online call"
    # every member's request went through the batches, once
    assert sorted(b["model"] for b in batch_provider.batch_requests) == sorted(MODELS * ROWS)
    assert batch_panel.votes() == online_panel.votes()

    def judged(run_id: str) -> tuple[dict, list[dict]]:
        metrics = {k: v for k, v in _read(tmp_path, run_id, "metrics.json").items()
                   if not k.startswith("cost/")}
        records = sorted(_read(tmp_path, run_id, "results.jsonl"), key=lambda r: r["request_id"])
        # the failures' wording differs (a batch's error line, an HTTP error): not compared
        return metrics, [{k: v for k, v in r.items()
                          if k.startswith(PREFIX) and "error_message" not in k} for r in records]

    assert judged("batch") == judged("online")
    assert _read(tmp_path, "batch", "metrics.json")[f"{PREFIX}/panel/3/error_count"] == 3
    # batch prices: half of each member's online price
    online_cost, batch_cost = (_read(tmp_path, r, "metrics.json") for r in ("online", "batch"))
    for model in MODELS:
        name = f"cost/model/openai/{model}/usd"
        assert online_cost[name] == pytest.approx(float(online_panel.cost(model)), rel=1e-12)
        assert batch_cost[name] == pytest.approx(float(batch_panel.cost(model)) / 2, rel=1e-12)


CHUNK_PREFIX = "retrieval/llm_judged/chunk_relevance"
_CHUNK = re.compile(r"ck(\d)kc")


class ChunkPanel(Panel):
    """Per chunk: honest says yes on (row + chunk) even, biased always yes, failing 500s on
    chunk 1 of every third row."""

    def __call__(self, body: dict) -> Reply:
        model, text = body["model"], prompt_text(body)
        row, chunk = int(_ROW.search(text).group(1)), int(_CHUNK.search(text).group(1))
        if model == "planted-failing" and row % 3 == 0 and chunk == 1:
            reply, rating = Reply(status=500, content="member down"), None
        else:
            rating = "yes" if model == "planted-biased" or (row + chunk) % 2 == 0 else "no"
            reply = Reply(json.dumps({"rationale": f"{model}: {rating}", "rating": rating}))
        with self._lock:
            self.log.append({"model": model, "row": row, "chunk": chunk, "rating": rating})
        return reply


def test_each_chunk_of_a_per_chunk_judge_is_the_panel_s_vote(fake_llm, tmp_path):
    panel = ChunkPanel()
    fake_llm.script = panel
    rows = [{"request_id": f"r{i}", "request": f"question zq{i}qz", "response": f"answer {i}",
             "retrieved_context": [{"doc_uri": f"d{i}-{k}", "content": f"text ck{k}kc"}
                                   for k in range(2)]} for i in range(6)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, [
        "evaluate", str(data), "--output", str(tmp_path / "out"), "--suite", "s", "--run-id",
        "c", "--judge-model", PANEL, "--api-base", fake_llm.api_base, "--judges",
        "chunk_relevance", "--max-attempts", "1", "--no-cache", "--max-error-share", "0.5"])
    assert result.exit_code == 0, result.output
    asked = {(e["model"], e["row"], e["chunk"]): e["rating"] for e in panel.log}
    assert len(asked) == len(panel.log) == 6 * 2 * 3
    ballots = {(i, k): tuple(asked[(m, i, k)] for m in MODELS) for i in range(6) for k in range(2)}
    records = {r["request_id"]: r for r in _read(tmp_path, "c", "results.jsonl")}
    for i in range(6):
        record = records[f"r{i}"]
        verdicts = [brute_verdict(ballots[(i, k)]) for k in range(2)]
        assert record[f"{CHUNK_PREFIX}/ratings"] == verdicts
        for number, model in enumerate(MODELS, start=1):
            assert record[f"{CHUNK_PREFIX}/panel/{number}/model"] == f"openai/{model}"
            assert record[f"{CHUNK_PREFIX}/panel/{number}/ratings"] == [
                ballots[(i, k)][number - 1] for k in range(2)]
        # a chunk the failing member left tied leaves the row without a precision
        expected = None if None in verdicts else verdicts.count("yes") / 2
        assert record[f"{CHUNK_PREFIX}/precision"] == expected
    metrics = _read(tmp_path, "c", "metrics.json")
    votes = list(ballots.values())
    for number in range(1, 4):
        answers = [v[number - 1] for v in votes if v[number - 1] is not None]
        assert metrics[f"{CHUNK_PREFIX}/panel/{number}/rate"] == answers.count("yes") / len(
            answers)
        assert metrics[f"{CHUNK_PREFIX}/panel/{number}/error_count"] == len(votes) - len(answers)
    complete = [v for v in votes if None not in v]
    assert metrics[f"{CHUNK_PREFIX}/panel/fleiss_kappa"] == pytest.approx(fleiss(complete),
                                                                          abs=1e-12)


def test_calibration_reports_each_member_and_the_panel_against_people(fake_llm, tmp_path):
    panel = Panel()
    fake_llm.script = panel
    rows = [{"request_id": f"r{i}", "request": f"question {i}", "response": f"answer zq{i}qz",
             "human_labels": {"safety": truth(i)}} for i in range(ROWS)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, [
        "evaluate", str(data), "--output", str(tmp_path / "out"), "--suite", "s", "--run-id",
        "cal", "--judge-model", PANEL, "--api-base", fake_llm.api_base, "--judges", "safety",
        "--max-attempts", "1", "--no-cache", "--max-error-share", "0.3"])
    assert result.exit_code == 0, result.output
    metrics = _read(tmp_path, "cal", "metrics.json")
    votes = panel.votes()
    people = [truth(i) for i in range(ROWS)]

    def cohen(pairs: list[tuple[str, str]]) -> float:
        n = len(pairs)
        observed = Fraction(sum(j == h for j, h in pairs), n)
        chance = sum(Fraction(sum(j == c for j, _ in pairs), n)
                     * Fraction(sum(h == c for _, h in pairs), n) for c in ("yes", "no"))
        return float((observed - chance) / (1 - chance))

    for number in range(1, 4):
        pairs = [(v[number - 1], h) for v, h in zip(votes, people, strict=True)
                 if v[number - 1] is not None]
        base = f"calibration/safety/panel/{number}"
        assert metrics[f"{base}/kappa"] == pytest.approx(cohen(pairs), abs=1e-12)
        assert metrics[f"{base}/labelled_count"] == len(pairs)
        assert metrics[f"{base}/error_count"] == ROWS - len(pairs)
    assert metrics["calibration/safety/panel/1/kappa"] == 1.0  # the honest member
    assert metrics["calibration/safety/panel/2/kappa"] == 0.0  # yes to everything
    # the panel's own verdicts, as any judge's
    decided = [(brute_verdict(v), h) for v, h in zip(votes, people, strict=True)
               if brute_verdict(v) is not None]
    assert metrics["calibration/safety/kappa"] == pytest.approx(cohen(decided), abs=1e-12)
    assert metrics["calibration/safety/error_count"] == ROWS - len(decided)
    # the terminal's headline is the judge's, not each member's
    assert "panel/1/kappa" not in result.output


class DriftPanel:
    """Two steady members and one that, once `drift` is set, says the opposite on even rows."""

    MODELS = ("planted-honest", "planted-drift", "planted-steady")

    def __init__(self) -> None:
        self.drift = False

    def __call__(self, body: dict) -> Reply:
        model, row = body["model"], int(_ROW.search(prompt_text(body)).group(1))
        rating = truth(row)
        if model == "planted-drift" and self.drift and row % 2 == 0:
            rating = "no" if rating == "yes" else "yes"
        return Reply(json.dumps({"rationale": f"{model}: {rating}", "rating": rating}))


def test_the_drift_canary_checks_each_member_against_its_own_baseline_verdicts(fake_llm,
                                                                              tmp_path):
    panel = DriftPanel()
    fake_llm.script = panel
    drift_panel = ",".join(f"openai/{m}" for m in DriftPanel.MODELS)
    rows = [{"request_id": f"r{i}", "request": f"question {i}", "response": f"answer zq{i}qz"}
            for i in range(ROWS)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gates = tmp_path / "gates.yaml"
    gates.write_text(f"gates:\n  - metric: {PREFIX}/rating/average\n    max_drop: 0.5\n")
    common = ["--suite", "ci", "--judge-model", drift_panel, "--api-base", fake_llm.api_base,
              "--output", str(tmp_path / "out"), "--judges", "safety", "--no-cache"]
    seeded = runner.invoke(app, ["evaluate", str(data), *common, "--run-id", "seed"])
    assert seeded.exit_code == 0, seeded.output
    panel.drift = True
    night = runner.invoke(app, ["regression", str(data), *common, "--run-id", "night",
                                "--gates", str(gates), "--no-pairwise", "--canary-rows",
                                str(ROWS)])
    canary = json.loads((tmp_path / "out" / "ci" / "night" / "manifest.json").read_text())[
        "regression"]["canary"]
    by_name = {j["name"]: j for j in canary["judges"]}
    # the panel's verdicts did not move (two steady members of three) ...
    assert (by_name["safety"]["agreed"], by_name["safety"]["compared"]) == (ROWS, ROWS)
    # ... but its drifting member did, on the even rows, and the canary says so
    drifting = by_name["safety panel member 2 (openai/planted-drift)"]
    assert (drifting["agreed"], drifting["compared"]) == (ROWS // 2, ROWS)
    assert by_name["safety panel member 1 (openai/planted-honest)"]["agreement"] == 1.0
    assert canary["drifted"] is True
    assert night.exit_code != 0, night.output
    assert "safety panel member 2 (openai/planted-drift) agrees with the baseline" in night.output


def test_each_sample_of_an_aspect_critic_asks_every_member(fake_llm, tmp_path):
    panel = Panel()
    fake_llm.script = panel
    rows = [{"request_id": f"r{i}", "request": f"question {i}", "response": f"answer zq{i}qz"}
            for i in range(ROWS)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, [
        "evaluate", str(data), "--output", str(tmp_path / "out"), "--suite", "s", "--run-id",
        "asp", "--judge-model", PANEL, "--api-base", fake_llm.api_base, "--judges", "safety",
        "--aspect", "concise=Is the answer concise?", "--strictness", "3", "--max-attempts",
        "1", "--no-cache", "--max-error-share", "0.3"])
    assert result.exit_code == 0, result.output
    # safety once and the aspect 3 times a row, each asking every member
    assert len(fake_llm.requests) == ROWS * 4 * len(MODELS)
    records = {r["request_id"]: r for r in _read(tmp_path, "asp", "results.jsonl")}
    (prefix,) = {k.rsplit("/", 1)[0] for k in records["r1"] if k.endswith("concise/verdicts")}
    by = {}
    for entry in panel.log:
        by.setdefault((entry["model"], entry["row"]), []).append(entry["rating"])
    for i in range(ROWS):
        record = records[f"r{i}"]
        samples = [tuple(by[(m, i)][0] for m in MODELS)] * 3  # each member answers alike
        for number, model in enumerate(MODELS):
            assert record[f"{prefix}/panel/{number + 1}/ratings"] == by[(model, i)][:3]
        votes = [brute_verdict(s) for s in samples]
        assert record[f"{prefix}/verdicts"] == votes
        majority = max(("yes", "no"), key=votes.count)
        assert record[f"{prefix}/rating"] == (majority if votes.count(majority) >= 2 else None)
    metrics = _read(tmp_path, "asp", "metrics.json")
    assert metrics[f"{prefix}/panel/3/error_count"] == 3 * 3  # every sample of 3 rows
    assert metrics[f"{prefix}/panel/fleiss_kappa_count"] == 9 * 3
