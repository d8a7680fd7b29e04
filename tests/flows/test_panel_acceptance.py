"""Issue 51's acceptance, replayed: one panel of three loopback judges with planted faults.

Member 1 drifts (after `drift` is set it flips its yes/no verdict on even rows and prefers the
worse answer of a pair), member 2 fails (HTTP 500 on every eighth row or pair), member 3 is
length-biased (yes when the answer is long; on pairs it prefers the longer answer). The same
panel goes through a regression night after night (its yes/no judge, its head-to-head with a
gate on the length-controlled win rate, the drift canary on both), `rejudge` and a batch run
with people's labels. Every verdict and figure is recomputed here from the server's own log
(what each model was asked and answered), never from what judgeflow computed; the panel tests
beside this one check each command alone, these check the numbers where they meet.
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

import flows.evaluate  # noqa: F401 - binds Prefect's log handler outside CliRunner (test_cli.py)
from flows.cli import app
from tests.fake_batch import FakeBatchServer
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_panel_compare import brute_outcome
from tests.flows.test_panel_evaluate import brute_verdict
from tests.judges.test_panel_stats import exact_fleiss

runner = CliRunner()
MODELS = ("planted-drift", "planted-failing", "planted-long")
PANEL = ",".join(f"openai/{m}" for m in MODELS)
PRICE = (Fraction("0.15"), Fraction("0.6"))  # USD per million input and output tokens
ROWS = 36  # a night's head-to-head needs 30 decided pairs for its length-controlled rate
FEW = 16  # rows of the runs that need no head-to-head
LONG = 120  # member 3 says yes to an answer longer than this
PREFIX = "response/llm_judged/safety"
_ROW = re.compile(r"zq(\d+)qz")
_SET = re.compile(r"set-(\w)")
_QUALITY = re.compile(r"#q=(\d)")
_BLOCK = re.compile(r"<untrusted-([\w-]+)>\n(.*?)\n</untrusted-\1>", re.DOTALL)


def answers(name: str, shift: int, lengths: tuple[int, int]) -> list[str]:
    """One answer per row: planted quality 1-5 (never the previous set's on the same row, so
    every pair has a better answer), a length, the set's and the row's tags."""
    rng = np.random.default_rng(shift)
    return [f"#q={1 + (i + shift) % 5} set-{name} zq{i}qz " + "x" * int(rng.integers(*lengths))
            for i in range(ROWS)]


# set b runs longer than a: the length-biased member favours it more than quality does
SETS = {"a": answers("a", 0, (10, 200)), "b": answers("b", 2, (60, 300)),
        "c": answers("c", 4, (10, 300))}


def truth(answer: str) -> str:
    return "yes" if int(_QUALITY.search(answer).group(1)) >= 3 else "no"


def tokens(body: dict) -> dict[str, int]:
    """The usage the server reports for a request: planted, different for every member."""
    text = prompt_text(body)
    return {"prompt": 30 + len(text) % 43 + 7 * len(body["model"]),
            "completion": 4 + int(_ROW.search(text).group(1)) % 6}


class Panel:
    """The three members on one server; every request, its answer and its tokens are logged."""

    def __init__(self, failing: bool = True) -> None:
        self.log: list[dict] = []
        self.failing = failing
        self.drift = False
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        model, text = body["model"], prompt_text(body)
        row = int(_ROW.search(text).group(1))
        blocks = dict(_BLOCK.findall(text))
        if model == "planted-failing" and self.failing and row % 8 == 3:
            reply, said = Reply(status=500, content="member down"), None
        elif "response_1" in blocks:
            reply, said = self._pair(model, row, blocks["response_1"], blocks["response_2"])
        else:
            reply, said = self._yes_no(model, row, blocks["response"])
        entry = {"model": model, "row": row, "said": said,
                 "sets": "".join(_SET.findall(text)), **tokens(body)}
        with self._lock:
            self.log.append(entry)
        return dataclasses.replace(reply, prompt_tokens=entry["prompt"],
                                   completion_tokens=entry["completion"])

    def _yes_no(self, model: str, row: int, answer: str) -> tuple[Reply, str]:
        rating = truth(answer)
        if model == "planted-long":
            rating = "yes" if len(answer) > LONG else "no"
        elif model == "planted-drift" and self.drift and row % 2 == 0:
            rating = "no" if rating == "yes" else "yes"
        return Reply(json.dumps({"rationale": f"{model}: {rating}", "rating": rating})), rating

    def _pair(self, model: str, row: int, first: str, second: str) -> tuple[Reply, str]:
        if model == "planted-long":
            merit = [len(first), len(second)]
        else:
            merit = [int(_QUALITY.search(t).group(1)) for t in (first, second)]
            if model == "planted-drift" and self.drift:
                merit = [-m for m in merit]
        position = "1" if merit[0] > merit[1] else "2" if merit[1] > merit[0] else "tie"
        # the side of the pair it prefers, by which set each answer came from
        sides = [_SET.search(t).group(1) for t in (first, second)]
        said = "tie" if position == "tie" else sides[int(position) - 1]
        criteria = [{"name": "accuracy", "description": "Correct.", "type": "scale",
                     "weight": 1, "score_1": int(_QUALITY.search(first).group(1)),
                     "score_2": int(_QUALITY.search(second).group(1))}]
        return Reply(json.dumps({"criteria": criteria, "preference": position,
                                 "rationale": f"{model} prefers {position}"})), said

    def entries(self, sets: str) -> list[dict]:
        """The logged calls whose prompt held exactly these sets' answers (in either order)."""
        return [e for e in self.log if sorted(e["sets"]) == sorted(sets)]

    def votes(self, name: str) -> list[tuple[str | None, ...]]:
        """Rows × members: the yes/no answers to set `name`'s rows (None: a 500)."""
        by = {(e["model"], e["row"]): e["said"] for e in self.entries(name)}
        return [tuple(by[(m, i)] for m in MODELS) for i in range(ROWS) if (MODELS[0], i) in by]

    def pair_verdicts(self, a: str, b: str) -> dict[int, tuple[str, ...]]:
        """Pair rows × members: each member's two passes reconciled, in A/B terms (A: set a)."""
        passes: dict[tuple[str, int], list[str | None]] = {}
        for e in self.entries(a + b):
            passes.setdefault((e["model"], e["row"]), []).append(e["said"])
        out = {}
        for row in sorted({r for _, r in passes}):
            members = []
            for m in MODELS:
                given = [{a: "A", b: "B"}.get(s, s) for s in passes[(m, row)] if s is not None]
                assert len(passes[(m, row)]) == 2  # both orders, once each
                if not given:
                    members.append("error")
                elif given[0] == given[-1]:
                    members.append(given[0])
                elif "tie" in given:  # lenient ties: the pass that chose a side
                    members.append(next(s for s in given if s != "tie"))
                else:
                    members.append("tie")  # the orders disagree: a position flip
            out[row] = tuple(members)
        return out

    def cost(self, model: str) -> Fraction:
        return sum((e["prompt"] * PRICE[0] + e["completion"] * PRICE[1]) / 10**6
                   for e in self.log if e["model"] == model and e["said"] is not None)


def lc_fit(pairs: list[tuple[str, str, str]]) -> tuple[float, float]:
    """Direct logistic fit of B winning on log2 length ratio over (A, B, outcome) decided pairs."""
    from scipy.optimize import minimize

    x = np.array([math.log2((len(b) + 1) / (len(a) + 1)) for a, b, o in pairs])
    wins = np.array([o == "B" for _, _, o in pairs], dtype=float)

    def nll(beta):
        eta = beta[0] + beta[1] * x
        return -np.sum(wins * eta - np.logaddexp(0, eta))

    beta = minimize(nll, np.zeros(2), method="BFGS", options={"gtol": 1e-9}).x
    return 1 / (1 + math.exp(-beta[0])), beta[1]


def _write(tmp_path, name: str, labels: bool = False, rows: int = ROWS):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(
        {"request_id": f"r{i}", "request": f"question {i}", "response": answer,
         **({"human_labels": {"safety": truth(answer)}} if labels else {})}) + "\n"
        for i, answer in enumerate(SETS[name][:rows])))
    return path


def _read(tmp_path, suite: str, run_id: str, name: str):
    path = tmp_path / "out" / suite / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


def _check_rows(records: list[dict], votes: list[tuple[str | None, ...]]) -> None:
    """Each row's verdict is the brute-force majority; a tie a failure left is never a pass."""
    by = {r["request_id"]: r for r in records}
    for i, vote in enumerate(votes):
        record = by[f"r{i}"]
        assert record[f"{PREFIX}/rating"] == brute_verdict(vote), (i, vote)
        for n, said in enumerate(vote, start=1):
            assert record[f"{PREFIX}/panel/{n}/rating"] == said


def _check_panel_figures(metrics: dict, votes: list[tuple[str | None, ...]]) -> None:
    for n in range(1, len(MODELS) + 1):
        said = [v[n - 1] for v in votes if v[n - 1] is not None]
        assert metrics[f"{PREFIX}/panel/{n}/rate"] == said.count("yes") / len(said)
        assert metrics[f"{PREFIX}/panel/{n}/error_count"] == len(votes) - len(said)
    for i, j in combinations(range(1, len(MODELS) + 1), 2):
        both = [(v[i - 1], v[j - 1]) for v in votes if None not in (v[i - 1], v[j - 1])]
        assert metrics[f"{PREFIX}/panel/{i}-{j}/agreement"] == (
            sum(x == y for x, y in both) / len(both))
    complete = [v for v in votes if None not in v]
    table = [[v.count(c) for c in ("yes", "no")] for v in complete]
    # the exact fraction, rounded once: the published float is that number, not near it
    assert metrics[f"{PREFIX}/panel/fleiss_kappa"] == float(exact_fleiss(table))
    assert metrics[f"{PREFIX}/panel/fleiss_kappa_count"] == len(complete)
    # its interval: 1000 resamples of those rows drawn with seed 0 (docs/judges.md), each
    # resample's kappa exact here
    draws = np.random.default_rng(0).integers(0, len(table), size=(1000, len(table)))
    kappas = [k for draw in draws if (k := exact_fleiss([table[d] for d in draw])) is not None]
    low, high = np.percentile([float(k) for k in kappas], [2.5, 97.5])
    assert metrics[f"{PREFIX}/panel/fleiss_kappa_lower"] == pytest.approx(low, abs=1e-12)
    assert metrics[f"{PREFIX}/panel/fleiss_kappa_upper"] == pytest.approx(high, abs=1e-12)
    decided = [v for v in votes if brute_verdict(v) is not None]
    one_vote = [v for v in decided if abs(v.count("yes") - v.count("no")) == 1]
    assert metrics[f"{PREFIX}/panel/one_vote_share"] == len(one_vote) / len(decided)
    assert metrics[f"{PREFIX}/rating/average"] == (
        sum(brute_verdict(v) == "yes" for v in decided) / len(decided))


def _check_ledger(metrics: dict, manifest: dict, panel: Panel) -> None:
    """Every member's cost, exact from the tokens the server sent on every call it answered."""
    for model in MODELS:
        exact = float(panel.cost(model))
        assert metrics[f"cost/model/openai/{model}/calls"] == sum(
            e["model"] == model and e["said"] is not None for e in panel.log), model
        assert metrics[f"cost/model/openai/{model}/usd"] == pytest.approx(exact, rel=1e-12)
        assert manifest["ledger"]["models"][f"openai/{model}"]["cost_usd"] == pytest.approx(
            exact, rel=1e-12)


def test_a_panel_s_regression_nights_match_a_recomputation_and_its_drift_is_named(fake_llm,
                                                                                  tmp_path):
    panel = Panel()
    fake_llm.script = panel
    gates = tmp_path / "gates.yaml"
    gates.write_text(f"gates:\n  - metric: {PREFIX}/rating/average\n    max_drop: 0.5\n"
                     "  - metric: lc_winrate\n    min: 0.0\n")
    common = ["--suite", "n", "--judge-model", PANEL, "--api-base", fake_llm.api_base,
              "--judges", "safety", "--max-attempts", "1", "--no-cache", "--output",
              str(tmp_path / "out"), "--price-per-mtok", "0.15,0.6", "--max-error-share",
              "0.15"]
    night = ["regression", "--gates", str(gates), "--canary-rows", "8", *common]
    seeded = runner.invoke(app, ["evaluate", str(_write(tmp_path, "a")), "--run-id", "seed",
                                 *common])
    assert seeded.exit_code == 0, seeded.output
    panel.log.clear()
    first = runner.invoke(app, [night[0], str(_write(tmp_path, "b")), *night[1:],
                                "--run-id", "n1"])
    assert first.exit_code == 0, first.output

    # the first night, every number: tonight's rows (set b) and the head-to-head (a against b)
    votes = panel.votes("b")
    assert len(votes) == ROWS
    _check_rows(_read(tmp_path, "n", "n1", "results.jsonl"), votes)
    metrics = _read(tmp_path, "n", "n1", "metrics.json")
    _check_panel_figures(metrics, votes)
    pairs = panel.pair_verdicts("a", "b")
    outcomes = {row: brute_outcome(v) for row, v in pairs.items()}
    records = {r["request_id"]: r for r in _read(tmp_path, "n", "n1", "results.jsonl")}
    for row, outcome in outcomes.items():
        assert records[f"r{row}"]["pairwise/verdict"] == outcome, (row, pairs[row])
        assert [records[f"r{row}"][f"pairwise/panel/{n}/verdict"] for n in (1, 2, 3)] == list(
            pairs[row])
    count = Counter(outcomes.values())
    assert count["error"] > 0  # the failing member left a pair split, and it decided nothing
    assert metrics["winrate"] == count["B"] / (count["A"] + count["B"])
    decided = [(SETS["a"][r], SETS["b"][r], o) for r, o in outcomes.items() if o in "AB"]
    lc_rate, lc_coef = lc_fit(decided)
    assert metrics["lc_pairs"] == len(decided)
    assert metrics["lc_winrate"] == pytest.approx(lc_rate, abs=1e-5)
    assert metrics["lc_length_coef"] == pytest.approx(lc_coef, abs=1e-4)
    # its direction: what controlling for length took from (or gave to) B's raw win rate
    assert metrics["lc_shift"] == pytest.approx(metrics["winrate"] - lc_rate, abs=1e-5)
    # the length-biased member's own verdicts follow length: its win rate is B's share of the
    # pairs where B is longer, exactly
    long_said = [v[2] for v in pairs.values()]
    assert long_said == ["B" if len(SETS["b"][r]) > len(SETS["a"][r]) else "A" for r in pairs]
    complete = [v for v in pairs.values() if "error" not in v]
    assert metrics["pairwise/panel/fleiss_kappa"] == float(exact_fleiss(
        [[v.count(c) for c in ("A", "B", "tie")] for v in complete]))
    # the pairs won by a single vote: the outcome's members one more than any other verdict's
    margins = [v.count(o) - max(v.count(c) for c in ("A", "B", "tie") if c != o)
               for v, o in zip(pairs.values(), outcomes.values(), strict=True) if o != "error"]
    assert metrics["pairwise/panel/decided_count"] == len(margins)
    assert metrics["pairwise/panel/one_vote_share"] == margins.count(1) / len(margins)
    assert 0 < margins.count(1) < len(margins)
    _check_ledger(metrics, _read(tmp_path, "n", "n1", "manifest.json"), panel)

    # the second night: member 1 drifts; the canary re-judges n1's rows and pairs
    panel.log.clear()
    panel.drift = True
    second = runner.invoke(app, [night[0], str(_write(tmp_path, "c")), *night[1:],
                                 "--run-id", "n2"])
    assert second.exit_code != 0, second.output
    manifest = _read(tmp_path, "n", "n2", "manifest.json")
    assert manifest["status"] == "incomplete"
    canary = manifest["regression"]["canary"]
    checked = {j["name"]: j for j in canary["judges"]}
    baseline = {r["request_id"]: r for r in _read(tmp_path, "n", "n1", "results.jsonl")}
    # each member against its own n1 verdicts, on the rows the canary asked (set b again)
    again = {(e["model"], e["row"]): e["said"] for e in panel.entries("b")}
    sampled = sorted({row for _, row in again})
    assert len(sampled) == 8
    for n, model in enumerate(MODELS, start=1):
        both = [(baseline[f"r{r}"][f"{PREFIX}/panel/{n}/rating"], again[(model, r)])
                for r in sampled]
        both = [(b, t) for b, t in both if b is not None]
        compared = [(b, t) for b, t in both if t is not None]
        line = checked[f"safety panel member {n} (openai/{model})"]
        assert (line["agreed"], line["compared"]) == (
            sum(b == t for b, t in compared), len(compared))
    drifted = checked["safety panel member 1 (openai/planted-drift)"]
    assert drifted["agreement"] < 0.9 <= checked[
        "safety panel member 3 (openai/planted-long)"]["agreement"]
    # the head-to-head canary: n1's pairs (a against b) judged again, member 1 reversed
    again_pairs = panel.pair_verdicts("a", "b")
    assert again_pairs and set(again_pairs) <= set(pairs)
    for n, model in enumerate(MODELS, start=1):
        both = [(pairs[r][n - 1], again_pairs[r][n - 1]) for r in again_pairs
                if pairs[r][n - 1] != "error"]
        compared = [(b, t) for b, t in both if t != "error"]
        line = checked[f"the pairwise judge (head-to-head) panel member {n} (openai/{model})"]
        assert (line["agreed"], line["compared"]) == (
            sum(b == t for b, t in compared), len(compared))
    assert checked["the pairwise judge (head-to-head) panel member 1 (openai/planted-drift)"][
        "agreement"] < 0.5
    assert canary["drifted"] is True
    assert "safety panel member 1 (openai/planted-drift) agrees with the baseline" in (
        second.output)
    # tonight's rows still judged by the whole panel, and every call of every phase costed
    _check_rows(_read(tmp_path, "n", "n2", "results.jsonl"), panel.votes("c"))
    _check_ledger(_read(tmp_path, "n", "n2", "metrics.json"), manifest, panel)
    # a drifted night never becomes the baseline
    assert json.loads((tmp_path / "out" / "n" / "baseline.json").read_text())["run_id"] == "n1"


def test_rejudge_asks_every_member_and_a_swapped_member_is_a_changed_judge(fake_llm, tmp_path):
    panel = Panel(failing=False)
    fake_llm.script = panel
    common = ["--suite", "r", "--api-base", fake_llm.api_base, "--output",
              str(tmp_path / "out"), "--max-attempts", "1"]
    seeded = runner.invoke(app, ["evaluate", str(_write(tmp_path, "a", rows=FEW)), "--run-id",
                                 "seed", "--judge-model", PANEL, "--judges", "safety", *common])
    assert seeded.exit_code == 0, seeded.output
    asked = Counter(e["model"] for e in panel.log)
    assert asked == {m: FEW for m in MODELS}
    # the same panel again: every member's reply cached, no call, every verdict the same
    same = runner.invoke(app, ["rejudge", "seed", "--judge-model", PANEL, *common])
    assert same.exit_code == 0, same.output
    assert Counter(e["model"] for e in panel.log) == asked
    # member 1 drifts under another name: only it is asked again, and the judge has changed
    panel.drift = True
    other = "openai/planted-drift,openai/planted-failing,openai/planted-long-2"
    swapped = runner.invoke(app, ["rejudge", "seed", "--judge-model", other, "--no-cache",
                                  *common])
    assert swapped.exit_code == 0, swapped.output
    new = [e for e in panel.log[sum(asked.values()):]]
    assert Counter(e["model"] for e in new) == {"planted-drift": FEW,
                                                "planted-failing": FEW,
                                                "planted-long-2": FEW}
    published = {p.name: json.loads((p / "manifest.json").read_text())
                 for p in (tmp_path / "out" / "r").iterdir() if (p / "manifest.json").exists()}
    by_source = {m["rejudge"]["fingerprint_changed"]: (run, m) for run, m in published.items()
                 if m.get("rejudge")}
    assert len(by_source) == 2
    # the same panel: the same judge
    assert by_source[False][1]["rejudge"]["judge_changes"] == {}
    # the swapped member changes the judge: the fingerprint names every member, the new one too
    rejudged, manifest = by_source[True]
    assert [m["model"] for m in manifest["judge_fingerprint"]["judges"][PREFIX]["members"]] == [
        f"openai/{m}" for m in ("planted-drift", "planted-failing", "planted-long-2")]
    (change,) = [c for c in manifest["rejudge"]["judge_changes"]["safety"]
                 if c.startswith("panel members")]
    assert "openai/planted-long'" in change and "openai/planted-long-2'" in change
    # how the verdicts moved, recomputed from both runs' votes as the server gave them
    seed_by = {(e["model"], e["row"]): e["said"] for e in panel.log[:sum(asked.values())]}
    by = {(e["model"], e["row"]): e["said"] for e in new}
    before = [brute_verdict(tuple(seed_by[(m, i)] for m in MODELS)) for i in range(FEW)]
    after = [brute_verdict(tuple(by[(m, i)] for m in ("planted-drift", "planted-failing",
                                                      "planted-long-2"))) for i in range(FEW)]
    records = {r["request_id"]: r for r in _read(tmp_path, "r", rejudged, "results.jsonl")}
    assert [records[f"r{i}"][f"{PREFIX}/rating"] for i in range(FEW)] == after
    (moved,) = manifest["rejudge"]["judges"]
    assert (moved["compared"], moved["agreed"]) == (FEW, sum(
        b == a for b, a in zip(before, after, strict=True)))
    assert moved["yes_to_no"] == sum(b == "yes" and a == "no"
                                     for b, a in zip(before, after, strict=True))
    # each member kept under the same model against its own verdicts, so a member's drift
    # cannot hide behind the majority; the swapped member has no earlier verdicts of its own
    members = {m["name"]: m for m in manifest["rejudge"]["members"]}
    assert set(members) == {"safety panel member 1 (openai/planted-drift)",
                            "safety panel member 2 (openai/planted-failing)"}
    for number, model in ((1, "planted-drift"), (2, "planted-failing")):
        line = members[f"safety panel member {number} (openai/{model})"]
        then, now = [seed_by[(model, i)] for i in range(FEW)], [by[(model, i)] for i in range(FEW)]
        assert (line["compared"], line["agreed"]) == (FEW, sum(
            b == a for b, a in zip(then, now, strict=True)))
        assert line["prefix"] == f"{PREFIX}/panel/{number}"
    assert members["safety panel member 1 (openai/planted-drift)"]["agreement"] < 0.9
    assert members["safety panel member 2 (openai/planted-failing)"]["agreement"] == 1.0


@pytest.fixture
def batch_provider():
    server = FakeBatchServer(Panel())
    server.start()
    yield server
    server.stop()


def test_a_batch_run_with_labels_publishes_each_member_s_calibration_and_stays_incomplete(
        batch_provider, tmp_path):
    panel = Panel()
    batch_provider.reset(panel)
    result = runner.invoke(app, [
        "evaluate", str(_write(tmp_path, "a", labels=True, rows=FEW)), "--output",
        str(tmp_path / "out"),
        "--suite", "b", "--run-id", "cal", "--judge-model", PANEL, "--api-base",
        batch_provider.api_base, "--judges", "safety", "--max-attempts", "1", "--no-cache",
        "--price-per-mtok", "0.15,0.6", "--max-error-share", "0.1", "--batch"])
    assert batch_provider.requests == [], "a batch run made an online call"
    votes = panel.votes("a")
    assert len(votes) == FEW and len(panel.log) == FEW * len(MODELS)
    _check_rows(_read(tmp_path, "b", "cal", "results.jsonl"), votes)
    metrics = _read(tmp_path, "b", "cal", "metrics.json")
    _check_panel_figures(metrics, votes)
    people = [truth(a) for a in SETS["a"][:FEW]]

    def cohen(pairs: list[tuple[str, str]]) -> float:
        n = len(pairs)
        observed = Fraction(sum(j == h for j, h in pairs), n)
        chance = sum(Fraction(sum(j == c for j, _ in pairs), n)
                     * Fraction(sum(h == c for _, h in pairs), n) for c in ("yes", "no"))
        return float((observed - chance) / (1 - chance))

    for n in range(1, len(MODELS) + 1):
        pairs = [(v[n - 1], h) for v, h in zip(votes, people, strict=True) if v[n - 1]]
        assert metrics[f"calibration/safety/panel/{n}/kappa"] == pytest.approx(cohen(pairs),
                                                                              abs=1e-12)
        assert metrics[f"calibration/safety/panel/{n}/labelled_count"] == len(pairs)
    decided = [(brute_verdict(v), h) for v, h in zip(votes, people, strict=True)
               if brute_verdict(v) is not None]
    assert metrics["calibration/safety/kappa"] == pytest.approx(cohen(decided), abs=1e-12)
    # the length-biased member disagrees with people, the panel does not: it is named, with the
    # option that keeps it from voting
    assert metrics["calibration/safety/panel/3/kappa_upper"] < metrics[
        "calibration/safety/kappa_lower"]
    entry = next(e for e in _read(tmp_path, "b", "cal", "manifest.json")["calibration"]["judges"]
                 if e["key"] == "safety")
    (line,) = entry["member_suggestions"]
    assert line.startswith("safety panel member 3 (openai/planted-long) disagrees with people")
    assert "--advisory-judge-model openai/planted-long" in line
    # batch prices are half of each member's online price
    for model in MODELS:
        assert metrics[f"cost/model/openai/{model}/usd"] == pytest.approx(
            float(panel.cost(model)) / 2, rel=1e-12)
    # member 2 failed on 2 of 16 rows (12.5%, above 10%): the batch run is incomplete
    failed = sum(v[1] is None for v in votes)
    assert failed == 2
    assert result.exit_code == 3, result.output
    manifest = _read(tmp_path, "b", "cal", "manifest.json")
    assert manifest["status"] == "incomplete"
    assert any(r.startswith(f"safety panel member 2: {failed} of {FEW} panel votes failed")
               for r in manifest["incomplete_reasons"]), manifest["incomplete_reasons"]


def test_a_batch_regression_s_canary_names_the_drifting_member_and_prices_every_call(
        batch_provider, tmp_path):
    panel = Panel()
    batch_provider.reset(panel)
    gates = tmp_path / "gates.yaml"
    gates.write_text(f"gates:\n  - metric: {PREFIX}/rating/average\n    max_drop: 0.5\n")
    common = ["--suite", "bn", "--judge-model", PANEL, "--api-base", batch_provider.api_base,
              "--judges", "safety", "--max-attempts", "1", "--no-cache", "--output",
              str(tmp_path / "out"), "--price-per-mtok", "0.15,0.6", "--max-error-share",
              "0.15", "--batch"]
    seeded = runner.invoke(app, ["evaluate", str(_write(tmp_path, "a", rows=FEW)), "--run-id",
                                 "seed", *common])
    assert seeded.exit_code == 0, seeded.output
    batch_provider.reset(panel)
    panel.log.clear()
    panel.drift = True
    night = runner.invoke(app, ["regression", str(_write(tmp_path, "b", rows=FEW)), "--run-id",
                                "night", "--gates", str(gates), "--no-pairwise",
                                "--canary-rows", "8", *common])
    assert night.exit_code != 0, night.output
    manifest = _read(tmp_path, "bn", "night", "manifest.json")
    assert manifest["status"] == "incomplete"
    canary = manifest["regression"]["canary"]
    checked = {j["name"]: j for j in canary["judges"]}
    assert checked["safety panel member 1 (openai/planted-drift)"]["agreement"] < 0.9
    assert canary["drifted"] is True
    # tonight's rows in batches; every call of the night, batched or online, priced as sent
    assert sorted(b["model"] for b in batch_provider.batch_requests
                  if "set-b" in prompt_text(b)) == sorted(MODELS * FEW)
    _check_rows(_read(tmp_path, "bn", "night", "results.jsonl"), panel.votes("b"))

    def cost(bodies: list[dict], model: str, share: Fraction) -> Fraction:
        return sum(((t := tokens(b))["prompt"] * PRICE[0] + t["completion"] * PRICE[1])
                   * share / 10**6 for b in bodies if b["model"] == model
                   and not (model == "planted-failing"
                            and int(_ROW.search(prompt_text(b)).group(1)) % 8 == 3))

    metrics = _read(tmp_path, "bn", "night", "metrics.json")
    for model in MODELS:
        exact = (cost(batch_provider.batch_requests, model, Fraction(1, 2))
                 + cost(batch_provider.requests, model, Fraction(1)))
        assert metrics[f"cost/model/openai/{model}/usd"] == pytest.approx(float(exact),
                                                                          rel=1e-12), model
        assert manifest["ledger"]["models"][f"openai/{model}"]["cost_usd"] == pytest.approx(
            float(exact), rel=1e-12)


def test_an_advisory_member_that_drifts_still_stops_the_night(fake_llm, tmp_path):
    panel = Panel()
    fake_llm.script = panel
    gates = tmp_path / "gates.yaml"
    gates.write_text(f"gates:\n  - metric: {PREFIX}/rating/average\n    max_drop: 0.5\n")
    # the drifting and length-biased members advise (as calibration suggests for the latter);
    # the failing one decides alone
    common = ["--suite", "adv", "--judge-model", PANEL, "--advisory-judge-model",
              "openai/planted-drift,openai/planted-long", "--api-base", fake_llm.api_base,
              "--judges", "safety", "--max-attempts", "1", "--no-cache", "--output",
              str(tmp_path / "out"), "--max-error-share", "0.15"]
    seeded = runner.invoke(app, ["evaluate", str(_write(tmp_path, "a", rows=FEW)), "--run-id",
                                 "seed", *common])
    assert seeded.exit_code == 0, seeded.output
    panel.log.clear()
    panel.drift = True
    night = runner.invoke(app, ["regression", str(_write(tmp_path, "b", rows=FEW)), "--run-id",
                                "night", "--gates", str(gates), "--no-pairwise",
                                "--canary-rows", "8", *common])
    # the verdicts are the voting member's; where it failed, the row's error, whatever the
    # advisers said
    records = {r["request_id"]: r for r in _read(tmp_path, "adv", "night", "results.jsonl")}
    votes = panel.votes("b")
    assert [records[f"r{i}"][f"{PREFIX}/rating"] for i in range(FEW)] == [v[1] for v in votes]
    assert None in [v[1] for v in votes]
    # its drift changed no verdict, but the canary names it and the night does not pass
    canary = _read(tmp_path, "adv", "night", "manifest.json")["regression"]["canary"]
    checked = {j["name"]: j for j in canary["judges"]}
    assert checked["safety"]["agreement"] == 1.0
    assert checked["safety panel member 1 (openai/planted-drift)"]["agreement"] < 0.9
    assert canary["drifted"] is True
    assert night.exit_code != 0, night.output
    assert _read(tmp_path, "adv", "night", "manifest.json")["status"] == "incomplete"


class MuteMember(Panel):
    """The panel without its failing member's faults; the length-biased member answers
    nothing (HTTP 500) while `mute` is set."""

    def __init__(self) -> None:
        super().__init__(failing=False)
        self.mute = True

    def __call__(self, body: dict) -> Reply:
        if body["model"] == "planted-long" and self.mute:
            return Reply(status=500, content="member down")
        return super().__call__(body)


def test_a_member_the_canary_cannot_see_in_the_baseline_leaves_the_night_undecided(
        fake_llm, tmp_path):
    panel = MuteMember()
    fake_llm.script = panel
    gates = tmp_path / "gates.yaml"
    gates.write_text(f"gates:\n  - metric: {PREFIX}/rating/average\n    max_drop: 0.5\n")
    # an advisory member that failed on every row leaves the baseline complete, without one
    # verdict of its own to compare tonight's with
    common = ["--suite", "mute", "--judge-model", PANEL, "--advisory-judge-model",
              "openai/planted-long", "--api-base", fake_llm.api_base, "--judges", "safety",
              "--max-attempts", "1", "--no-cache", "--output", str(tmp_path / "out")]
    seeded = runner.invoke(app, ["evaluate", str(_write(tmp_path, "a", rows=FEW)), "--run-id",
                                 "seed", *common])
    assert seeded.exit_code == 0, seeded.output
    assert _read(tmp_path, "mute", "seed", "manifest.json")["status"] == "complete"
    panel.mute = False
    night = runner.invoke(app, ["regression", str(_write(tmp_path, "a", rows=FEW)), "--run-id",
                                "night", "--gates", str(gates), "--no-pairwise",
                                "--canary-rows", "8", *common])
    manifest = _read(tmp_path, "mute", "night", "manifest.json")
    canary = manifest["regression"]["canary"]
    checked = {j["name"]: j for j in canary["judges"] if j["compared"] + j["errors"]}
    assert checked["safety"]["agreement"] == 1.0  # the voters are checked and steady
    assert "safety panel member 3 (openai/planted-long)" not in checked
    assert night.exit_code != 0, night.output
    assert manifest["status"] == "incomplete"
    reasons = manifest["regression"]["incomplete_reasons"]
    assert any("did not check safety panel member 3 (openai/planted-long)" in r
               for r in reasons), reasons
