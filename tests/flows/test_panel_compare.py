"""A panel of three loopback judges through `judgeflow compare`, checked against the server's log.

One member is honest (prefers the answer of higher planted quality), one is length-biased
(prefers the longer answer), one fails (HTTP 500) on both orders of every fourth pair and on
the backward order of the next. Each pair's outcome, each member's verdicts, the Nova block,
`winrate` and `lc_winrate` are recomputed here from what the server was asked and answered,
never from what judgeflow computed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
from collections import Counter
from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest
from typer.testing import CliRunner

import flows.compare  # noqa: F401 - Prefect's log handler binds outside CliRunner (test_cli.py)
from flows.cli import app
from tests.fake_llm import Reply, prompt_text
from tests.judges.test_panel_stats import exact_fleiss

runner = CliRunner()
MODELS = ("planted-honest", "planted-long", "planted-failing")
PANEL = ",".join(f"openai/{m}" for m in MODELS)
PAIRS = 60
PRICE = (Fraction("0.15"), Fraction("0.6"))  # USD per million input and output tokens
_PAIR = re.compile(r"zq(\d+)qz")
_BLOCK = re.compile(r"<untrusted-([\w-]+)>\n(.*?)\n</untrusted-\1>", re.DOTALL)
_QUALITY = re.compile(r"#q=(\d)")


def planted_pairs() -> list[dict]:
    """Pair 0: B better, A longer, the failing member silent: the panel is split, an error."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(PAIRS):
        qa, qb = (2, 5) if i == 0 else rng.integers(1, 6, 2)
        la, lb = (400, 20) if i == 0 else rng.choice(np.arange(10, 400), 2, replace=False)
        rows.append({"id": f"p{i}", "prompt": f"Which plan fits? zq{i}qz",
                     "response_A": f"#q={qa} " + "a" * int(la) + " <b>A</b>",
                     "response_B": f"#q={qb} " + "b" * int(lb) + " <b>B</b>"})
    return rows


class Panel:
    """The three members on one server; every request and its answer (A/B terms) is logged."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self.log: list[dict] = []
        self.failing = True  # planted-failing fails as planned; False: it answers every call
        self.drifted = False  # True: planted-long now prefers the shorter answer
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        model, text = body["model"], prompt_text(body)
        i = int(_PAIR.search(text).group(1))
        blocks = dict(_BLOCK.findall(text))
        if "response_1" not in blocks:  # a yes/no judge of a regression's rows: all pass
            return Reply(json.dumps({"rationale": "fine", "rating": "yes"}))
        first, second = blocks["response_1"], blocks["response_2"]
        order = "forward" if first == self.rows[i]["response_A"] else "backward"
        if model == "planted-failing" and self.failing and (
                i % 4 == 0 or (i % 4 == 1 and order == "backward")):
            reply, side = Reply(status=500, content="member down"), None
        else:
            if model == "planted-long":
                merit = [len(first), len(second)]
                merit = [-m for m in merit] if self.drifted else merit
            else:
                merit = [int(_QUALITY.search(t).group(1)) for t in (first, second)]
            position = "1" if merit[0] > merit[1] else "2" if merit[1] > merit[0] else "tie"
            criteria = [{"name": "accuracy", "description": "Correct.", "type": "scale",
                         "weight": 1, "score_1": int(_QUALITY.search(first).group(1)),
                         "score_2": int(_QUALITY.search(second).group(1))}]
            reply = Reply(json.dumps({"criteria": criteria, "preference": position,
                                      "rationale": f"{model} <i>prefers</i> {position}"}))
            side = "tie" if position == "tie" else (
                ("A" if position == "1" else "B") if order == "forward"
                else ("B" if position == "1" else "A"))
        prompt, completion = 40 + len(text) % 37 + 5 * MODELS.index(model), 6 + i % 4
        with self._lock:
            self.log.append({"model": model, "pair": i, "order": order, "side": side,
                             "prompt": prompt, "completion": completion})
        assert order == "forward" or second == self.rows[i]["response_A"]
        return dataclasses.replace(reply, prompt_tokens=prompt, completion_tokens=completion)

    def cost(self, model: str) -> Fraction:
        """What the member's answered calls cost at PRICE, exactly."""
        return sum((e["prompt"] * PRICE[0] + e["completion"] * PRICE[1]) / 10**6
                   for e in self.log if e["model"] == model and e["side"] is not None)

    def member_verdicts(self, pairs: int = PAIRS) -> list[tuple[str, ...]]:
        """Pairs × members: each member's two passes reconciled here (lenient ties)."""
        passes = {(e["model"], e["pair"], e["order"]): e["side"] for e in self.log}
        assert len(passes) == len(self.log) == pairs * 2 * len(MODELS)  # no retry
        out = []
        for i in range(pairs):
            row = []
            for m in MODELS:
                f, b = passes[(m, i, "forward")], passes[(m, i, "backward")]
                given = [s for s in (f, b) if s is not None]
                if not given:
                    row.append("error")
                elif len(given) == 1 or given[0] == given[1]:
                    row.append(given[0])
                elif "tie" in given:
                    row.append(next(s for s in given if s != "tie"))
                else:
                    row.append("tie")  # the orders disagree: a position flip
            out.append(tuple(row))
        return out


def brute_outcome(verdicts: tuple[str, ...]) -> str:
    """More than half of the members that have a verdict, and at least two of them."""
    said = [v for v in verdicts if v != "error"]
    for side, count in Counter(said).items():
        if len(said) >= 2 and 2 * count > len(said):
            return side
    return "error"


def lc_fit(rows: list[dict], outcomes: list[str]) -> tuple[float, float]:
    """Direct logistic fit of B winning on log2 length ratio over decided, untied pairs."""
    from scipy.optimize import minimize

    x = np.array([math.log2((len(r["response_B"]) + 1) / (len(r["response_A"]) + 1))
                  for r, o in zip(rows, outcomes, strict=True) if o in ("A", "B")])
    wins = np.array([o == "B" for o in outcomes if o in ("A", "B")], dtype=float)

    def nll(beta):
        eta = beta[0] + beta[1] * x
        return -np.sum(wins * eta - np.logaddexp(0, eta))

    beta = minimize(nll, np.zeros(2), method="BFGS", options={"gtol": 1e-9}).x
    return 1 / (1 + math.exp(-beta[0])), beta[1]


def _compare(tmp_path, fake_llm, run_id: str, *extra: str):
    rows = planted_pairs()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    panel = Panel(rows)
    fake_llm.script = panel
    result = runner.invoke(app, [
        "compare", str(data), "--output", str(tmp_path / "out"), "--suite", "c", "--run-id",
        run_id, "--judge-model", PANEL, "--api-base", fake_llm.api_base, "--max-attempts", "1",
        "--no-cache", *extra])
    return result, panel, rows


def _read(tmp_path, run_id: str, name: str):
    path = tmp_path / "out" / "c" / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


def test_a_panel_judges_pairs_and_every_figure_matches_a_recomputation(fake_llm, tmp_path):
    result, panel, rows = _compare(tmp_path, fake_llm, "ok", "--max-error-share", "0.5",
                                   "--price-per-mtok", "0.15,0.6")
    assert result.exit_code == 0, result.output
    members = panel.member_verdicts()
    outcomes = [brute_outcome(v) for v in members]
    assert {"A", "B", "error"} <= set(outcomes)
    records = {r["request_id"]: r for r in _read(tmp_path, "ok", "results.jsonl")}
    for i, row in enumerate(rows):
        record = records[row["id"]]
        assert record["pairwise/verdict"] == outcomes[i], (i, members[i])
        for n, model in enumerate(MODELS, start=1):
            assert record[f"pairwise/panel/{n}/model"] == f"openai/{model}"
            assert record[f"pairwise/panel/{n}/verdict"] == members[i][n - 1]
            assert (record[f"pairwise/panel/{n}/error_message"] is None) == (
                members[i][n - 1] != "error")
        if outcomes[i] == "error":
            assert record["pairwise/error_message"]
    # the pair the failing member left split: B by quality, A by length, no third voice
    assert members[0] == ("B", "A", "error") and records["p0"]["pairwise/verdict"] == "error"
    assert "no majority" in records["p0"]["pairwise/error_message"]

    metrics = _read(tmp_path, "ok", "metrics.json")
    count = Counter(outcomes)
    # the panel's outcome counts as both passes of its pair (docs/pairwise.md)
    assert (metrics["a_scores"], metrics["b_scores"], metrics["ties"],
            metrics["inference_error"]) == (2 * count["A"], 2 * count["B"], 2 * count["tie"],
                                            2 * count["error"])
    assert (metrics["pairs_a"], metrics["pairs_b"], metrics["pairs_tie"],
            metrics["pairs_error"]) == (count["A"], count["B"], count["tie"], count["error"])
    assert metrics["winrate"] == pytest.approx(count["B"] / (count["A"] + count["B"]))
    lc_rate, lc_coef = lc_fit(rows, outcomes)
    assert metrics["lc_pairs"] == count["A"] + count["B"]
    assert metrics["lc_winrate"] == pytest.approx(lc_rate, abs=1e-5)
    assert metrics["lc_length_coef"] == pytest.approx(lc_coef, abs=1e-4)
    # each member's win rate over its own decided pairs, agreement and kappa over A/B/tie
    for n in range(1, len(MODELS) + 1):
        said = [v[n - 1] for v in members]
        a, b = said.count("A"), said.count("B")
        assert metrics[f"pairwise/panel/{n}/winrate"] == pytest.approx(b / (a + b))
        assert metrics[f"pairwise/panel/{n}/decided_count"] == a + b
        assert metrics[f"pairwise/panel/{n}/error_count"] == said.count("error")
    for i, j in combinations(range(1, len(MODELS) + 1), 2):
        both = [(v[i - 1], v[j - 1]) for v in members if "error" not in (v[i - 1], v[j - 1])]
        assert metrics[f"pairwise/panel/{i}-{j}/agreement"] == pytest.approx(
            sum(p == q for p, q in both) / len(both))
        assert metrics[f"pairwise/panel/{i}-{j}/agreement_count"] == len(both)
    complete = [v for v in members if "error" not in v]
    table = [[v.count(c) for c in ("A", "B", "tie")] for v in complete]
    assert metrics["pairwise/panel/fleiss_kappa_count"] == len(complete)
    assert metrics["pairwise/panel/fleiss_kappa"] == pytest.approx(
        float(exact_fleiss(table)), abs=1e-12)
    assert (metrics["pairwise/panel/fleiss_kappa_lower"]
            <= metrics["pairwise/panel/fleiss_kappa"]
            <= metrics["pairwise/panel/fleiss_kappa_upper"])
    # the cost ledger per model, exact from the tokens the server sent for both orders
    ledger = _read(tmp_path, "ok", "manifest.json")["ledger"]
    for model in MODELS:
        exact = float(panel.cost(model))
        assert metrics[f"cost/model/openai/{model}/usd"] == pytest.approx(exact, rel=1e-12)
        assert ledger["models"][f"openai/{model}"]["cost_usd"] == pytest.approx(exact, rel=1e-12)
        assert metrics[f"cost/model/openai/{model}/calls"] == sum(
            e["model"] == model and e["side"] is not None for e in panel.log)
    # the drill-down shows each member's verdict, escaped
    report = _read(tmp_path, "ok", "report.html")
    assert "planted-long" in report and "<i>prefers</i>" not in report


def test_a_failing_member_above_max_error_share_makes_the_comparison_incomplete(
        fake_llm, tmp_path):
    result, panel, _ = _compare(tmp_path, fake_llm, "bad", "--max-error-share", "0.2")
    assert result.exit_code == 3, result.output
    members = panel.member_verdicts()
    failed = sum(v[2] == "error" for v in members)
    assert failed == PAIRS // 4  # above 0.2 of the pairs; the panel's own errors are fewer
    assert sum(brute_outcome(v) == "error" for v in members) / PAIRS <= 0.2
    assert f"pairwise panel member 3: {failed} of {PAIRS} pairs failed" in result.output
    assert _read(tmp_path, "bad", "manifest.json")["status"] == "incomplete"


def test_a_regression_head_to_head_with_a_panel_votes_and_names_a_failing_member(
        fake_llm, tmp_path):
    rows = planted_pairs()[:36]
    for name, side in (("seed", "response_A"), ("night", "response_B")):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(
            {"request_id": r["id"], "request": r["prompt"], "response": r[side]}) + "\n"
            for r in rows))
    (tmp_path / "gates.yaml").write_text("gates: []\n")
    common = ["--suite", "n", "--judge-model", PANEL, "--api-base", fake_llm.api_base,
              "--judges", "safety", "--max-attempts", "1", "--no-cache", "--output",
              str(tmp_path / "out")]
    panel = Panel(rows)
    fake_llm.script = panel
    seeded = runner.invoke(app, ["evaluate", str(tmp_path / "seed.jsonl"), "--run-id", "seed",
                                 *common])
    assert seeded.exit_code == 0, seeded.output
    panel.log.clear()
    result = runner.invoke(app, ["regression", str(tmp_path / "night.jsonl"), "--run-id",
                                 "night", "--gates", str(tmp_path / "gates.yaml"),
                                 "--max-error-share", "0.2", *common])
    members = panel.member_verdicts(len(rows))
    outcomes = [brute_outcome(v) for v in members]
    records = {r["request_id"]: r for r in _read_suite(tmp_path, "n", "night", "results.jsonl")}
    for i, row in enumerate(rows):
        assert records[row["id"]]["pairwise/verdict"] == outcomes[i]
        assert records[row["id"]]["pairwise/panel/3/verdict"] == members[i][2]
    metrics = _read_suite(tmp_path, "n", "night", "metrics.json")
    count = Counter(outcomes)
    assert metrics["winrate"] == pytest.approx(count["B"] / (count["A"] + count["B"]))
    said = [v[2] for v in members]
    assert metrics["pairwise/panel/3/winrate"] == pytest.approx(
        said.count("B") / (said.count("A") + said.count("B")))
    failed = sum(v[2] == "error" for v in members)
    assert failed / len(rows) > 0.2
    manifest = _read_suite(tmp_path, "n", "night", "manifest.json")
    assert manifest["status"] == "incomplete", manifest["status"]
    assert result.exit_code == 3, result.output
    assert f"pairwise panel member 3: {failed} of {len(rows)} pairs failed" in result.output


def _read_suite(tmp_path, suite: str, run_id: str, name: str):
    path = tmp_path / "out" / suite / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text())


def test_the_canary_checks_each_head_to_head_member_and_finds_the_one_that_drifted(
        fake_llm, tmp_path):
    rows = planted_pairs()[:36]
    for name, side in (("seed", "response_A"), ("night", "response_B")):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(
            {"request_id": r["id"], "request": r["prompt"], "response": r[side]}) + "\n"
            for r in rows))
    (tmp_path / "gates.yaml").write_text("gates:\n  - metric: winrate\n    min: 0.0\n")
    common = ["--suite", "d", "--judge-model", PANEL, "--api-base", fake_llm.api_base,
              "--judges", "safety", "--max-attempts", "1", "--no-cache", "--output",
              str(tmp_path / "out")]
    night = ["regression", str(tmp_path / "night.jsonl"), "--gates",
             str(tmp_path / "gates.yaml"), "--canary-rows", "36", *common]
    panel = Panel(rows)
    panel.failing = False
    fake_llm.script = panel
    assert runner.invoke(app, ["evaluate", str(tmp_path / "seed.jsonl"), "--run-id", "seed",
                               *common]).exit_code == 0
    first = runner.invoke(app, [*night, "--run-id", "n1"])
    assert first.exit_code == 0, first.output  # the next baseline, its pairs judged by three
    panel.drifted = True
    second = runner.invoke(app, [*night, "--run-id", "n2"])
    canary = _read_suite(tmp_path, "d", "n2", "manifest.json")["regression"]["canary"]
    checked = {j["name"]: j for j in canary["judges"]}
    long_name = f"the pairwise judge (head-to-head) panel member 2 (openai/{MODELS[1]})"
    honest_name = f"the pairwise judge (head-to-head) panel member 1 (openai/{MODELS[0]})"
    assert checked[honest_name]["agreement"] == 1.0
    assert checked[long_name]["agreement"] < 0.2  # it now prefers the shorter answer
    assert canary["drifted"] is True and second.exit_code != 0, second.output


@pytest.fixture
def batch_provider():
    from tests.fake_batch import FakeBatchServer

    server = FakeBatchServer(Panel(planted_pairs()))
    server.start()
    yield server
    server.stop()


def test_a_panel_with_an_advisory_member_judges_pairs_in_batch_mode_as_online(batch_provider,
                                                                              tmp_path):
    rows = planted_pairs()
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def compare(run_id: str, *extra: str):
        panel = Panel(rows)
        batch_provider.reset(panel)
        result = runner.invoke(app, [
            "compare", str(data), "--output", str(tmp_path / "out"), "--suite", "c", "--run-id",
            run_id, "--judge-model", PANEL, "--api-base", batch_provider.api_base,
            "--max-attempts", "1", "--no-cache", "--max-error-share", "0.3",
            "--advisory-judge-model", "openai/planted-long", *extra])
        return result, panel

    online, online_panel = compare("online")
    batch, batch_panel = compare("batch", "--batch")
    assert online.exit_code == 0, online.output
    assert batch.exit_code == 0, batch.output
    assert batch_provider.requests == [], "a batch run made an online call"
    assert sorted(b["model"] for b in batch_provider.batch_requests) == sorted(
        MODELS * (2 * PAIRS))
    members = batch_panel.member_verdicts()
    assert members == online_panel.member_verdicts()
    # the voters are honest and failing: the length-biased member is asked but does not vote
    outcomes = [brute_outcome((v[0], v[2])) if "error" not in (v[0], v[2]) else "error"
                for v in members]
    records = {r["request_id"]: r for r in _read(tmp_path, "batch", "results.jsonl")}
    assert [records[r["id"]]["pairwise/verdict"] for r in rows] == outcomes
    assert all(records[r["id"]]["pairwise/panel/2/advisory"] is True for r in rows)
    assert any(brute_outcome(v) != o for v, o in zip(members, outcomes, strict=True))
    metrics = {k: v for k, v in _read(tmp_path, "batch", "metrics.json").items()
               if not k.startswith("cost/")}
    assert metrics["pairwise/panel/2/advisory"] is True
    assert metrics["pairwise/panel/fleiss_kappa_raters"] == 2
    voters = [(v[0], v[2]) for v in members if "error" not in (v[0], v[2])]
    table = [[v.count(c) for c in ("A", "B", "tie")] for v in voters]
    assert metrics["pairwise/panel/fleiss_kappa_count"] == len(voters)
    assert metrics["pairwise/panel/fleiss_kappa"] == pytest.approx(
        float(exact_fleiss(table)), abs=1e-12)
    said = [v[1] for v in members]  # the advisory member's own win rate, counted all the same
    assert metrics["pairwise/panel/2/winrate"] == pytest.approx(
        said.count("B") / (said.count("A") + said.count("B")))
    # the failures' wording differs (a batch's error line, an HTTP error): not compared
    online_metrics = {k: v for k, v in _read(tmp_path, "online", "metrics.json").items()
                      if not k.startswith("cost/")}
    assert metrics == online_metrics
