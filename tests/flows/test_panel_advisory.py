"""An advisory panel member through `judgeflow evaluate`, checked against the server's own log.

Three voting loopback members (honest, biased to pass everything, and one that says "no" on
every fourth row) and one advisory member that answers the opposite of the honest one and
fails (HTTP 500) on every other row. The row's verdict must be the voting members' majority,
recomputed here from what the server answered; the advisory member's own verdicts are
published and counted; its failures leave the run complete, a voting member's do not.
"""

from __future__ import annotations

import json
import re
import threading
from itertools import combinations

import pytest
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's log handler outside CliRunner (test_cli.py)
from flows.cli import app
from tests.fake_llm import Reply, prompt_text
from tests.flows.test_panel_evaluate import fleiss

runner = CliRunner()
MODELS = ("planted-honest", "planted-biased", "planted-strict", "planted-contrary")
PANEL = ",".join(f"openai/{m}" for m in MODELS)
ADVISORY = "openai/planted-contrary"
ROWS = 16
PREFIX = "response/llm_judged/safety"
_ROW = re.compile(r"zq(\d+)qz")


def truth(row: int) -> str:
    return "no" if row % 3 == 0 else "yes"


class Panel:
    """Every member on one server; each request and its answer is logged."""

    def __init__(self, contrary_fails: bool = True) -> None:
        self.log: list[dict] = []
        self.contrary_fails = contrary_fails
        self._lock = threading.Lock()

    def rating(self, model: str, row: int) -> str | None:
        if model == "planted-biased":
            return "yes"
        if model == "planted-strict":
            return "no" if row % 4 == 0 else truth(row)
        if model == "planted-contrary":
            if self.contrary_fails and row % 2 == 0:
                return None
            return "yes" if truth(row) == "no" else "no"
        return truth(row)

    def __call__(self, body: dict) -> Reply:
        model, row = body["model"], int(_ROW.search(prompt_text(body)).group(1))
        rating = self.rating(model, row)
        with self._lock:
            self.log.append({"model": model, "row": row, "rating": rating})
        if rating is None:
            return Reply(status=500, content="contrary member down")
        return Reply(json.dumps({"rationale": f"{model} says {rating}", "rating": rating}))

    def votes(self) -> list[tuple[str | None, ...]]:
        """Rows × members, as the server answered (None: a 500)."""
        by = {(e["model"], e["row"]): e["rating"] for e in self.log}
        assert len(by) == len(self.log) == ROWS * len(MODELS)  # one request each, no retry
        return [tuple(by[(m, row)] for m in MODELS) for row in range(ROWS)]


def majority(votes: tuple[str | None, ...]) -> str | None:
    """More yes than no (or the reverse) among answers, with a majority of members answering."""
    yes, no = votes.count("yes"), votes.count("no")
    if yes + no < len(votes) // 2 + 1 or yes == no:
        return None
    return "yes" if yes > no else "no"


def _set(tmp_path, labels: bool = False):
    rows = [{"request_id": f"r{i}", "request": f"question {i}", "response": f"answer zq{i}qz",
             **({"human_labels": {"safety": truth(i)}} if labels else {})}
            for i in range(ROWS)]
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def _evaluate(tmp_path, api_base: str, run_id: str, *extra: str, panel: str = PANEL,
              data=None):
    return runner.invoke(app, [
        "evaluate", str(data or _set(tmp_path)), "--output", str(tmp_path / "out"), "--suite",
        "s", "--run-id", run_id, "--judge-model", panel, "--api-base", api_base, "--judges",
        "safety", "--max-attempts", "1", "--max-error-share", "0.1", *extra])


def _read(tmp_path, run_id: str, name: str):
    path = tmp_path / "out" / "s" / run_id / name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text().splitlines()]
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


def test_an_advisory_member_is_published_but_the_voting_members_decide(fake_llm, tmp_path):
    panel = Panel()
    fake_llm.script = panel
    result = _evaluate(tmp_path, fake_llm.api_base, "adv", "--no-cache",
                       "--advisory-judge-model", ADVISORY)
    votes = panel.votes()
    voters = [v[:3] for v in votes]

    # each row's verdict is the voting members' majority, never the whole panel's
    records = sorted(_read(tmp_path, "adv", "results.jsonl"),
                     key=lambda r: int(r["request_id"][1:]))
    expected = [majority(v) for v in voters]
    assert [r[f"{PREFIX}/rating"] for r in records] == expected
    assert None not in expected  # three voters that always answer: every row decided
    # the advisory member would have tied rows it answered; it did not
    assert any(majority(v) is None for v in votes if v[3] is not None)
    for row, record in zip(votes, records, strict=True):
        for number, (model, vote) in enumerate(zip(MODELS, row, strict=True), start=1):
            assert record[f"{PREFIX}/panel/{number}/model"] == f"openai/{model}"
            assert record[f"{PREFIX}/panel/{number}/rating"] == vote
            assert record.get(f"{PREFIX}/panel/{number}/advisory") is (
                True if number == 4 else None)
        assert (record[f"{PREFIX}/panel/4/error_message"] is None) == (row[3] is not None)

    metrics = _read(tmp_path, "adv", "metrics.json")
    # every member's own figures, the advisory one's included
    for number in range(1, 5):
        answers = [v[number - 1] for v in votes if v[number - 1] is not None]
        base = f"{PREFIX}/panel/{number}"
        assert metrics[f"{base}/rate"] == answers.count("yes") / len(answers)
        assert metrics[f"{base}/rated_count"] == len(answers)
        assert metrics[f"{base}/error_count"] == ROWS - len(answers)
    assert metrics[f"{PREFIX}/panel/4/advisory"] is True
    assert f"{PREFIX}/panel/1/advisory" not in metrics
    for i, j in combinations(range(1, 5), 2):
        both = [(v[i - 1], v[j - 1]) for v in votes if None not in (v[i - 1], v[j - 1])]
        assert metrics[f"{PREFIX}/panel/{i}-{j}/agreement"] == (
            sum(x == y for x, y in both) / len(both))
    # Fleiss' kappa and the one-vote share are the voting members'
    assert metrics[f"{PREFIX}/panel/fleiss_kappa_raters"] == 3
    assert metrics[f"{PREFIX}/panel/fleiss_kappa_count"] == ROWS
    assert metrics[f"{PREFIX}/panel/fleiss_kappa"] == pytest.approx(fleiss(voters), abs=1e-12)
    one_vote = [v for v in voters if abs(v.count("yes") - v.count("no")) == 1]
    assert metrics[f"{PREFIX}/panel/one_vote_share"] == len(one_vote) / ROWS
    assert metrics[f"{PREFIX}/rating/average"] == expected.count("yes") / ROWS
    # the advisory member is asked and costed like any member
    assert metrics["cost/model/openai/planted-contrary/calls"] == ROWS // 2

    # it fails on half of the rows, far above max_error_share: named, but the run is complete
    assert result.exit_code == 0, result.output
    manifest = _read(tmp_path, "adv", "manifest.json")
    assert manifest["status"] == "complete" and manifest["incomplete_reasons"] == []
    (failure,) = manifest["advisory_failures"]
    assert failure.startswith(f"safety panel member 4 (advisory): {ROWS // 2} of {ROWS} panel "
                              "votes failed")
    assert "safety panel member 4 (advisory)" in result.output
    assert manifest["judge"]["members"][3]["advisory"] is True
    assert "advisory" not in manifest["judge"]["members"][0]
    assert manifest["config"]["judge"]["advisory"] == [ADVISORY]
    report = _read(tmp_path, "adv", "report.html")
    assert "member 4 (openai/planted-contrary, advisory: does not vote)" in report


def test_a_failing_voting_member_still_makes_the_run_incomplete(fake_llm, tmp_path):
    panel = Panel()
    fake_llm.script = panel
    # the failing member votes; another one is advisory
    result = _evaluate(tmp_path, fake_llm.api_base, "vote", "--no-cache",
                       "--advisory-judge-model", "openai/planted-biased")
    assert result.exit_code == 3, result.output
    # the voters are honest, strict and contrary; where the contrary member failed, honest and
    # strict may tie (a row error); where it answered, it votes
    votes = panel.votes()
    expected = [majority((v[0], v[2], v[3])) for v in votes]
    records = sorted(_read(tmp_path, "vote", "results.jsonl"),
                     key=lambda r: int(r["request_id"][1:]))
    assert [r[f"{PREFIX}/rating"] for r in records] == expected
    assert records[0][f"{PREFIX}/panel/2/advisory"] is True
    manifest = _read(tmp_path, "vote", "manifest.json")
    assert manifest["status"] == "incomplete"
    assert [r.split(" (judge")[0] for r in manifest["incomplete_reasons"]] == [
        f"safety: {expected.count(None)} of {ROWS} rows failed",
        f"safety panel member 4: {ROWS // 2} of {ROWS} panel votes failed"]
    assert "advisory_failures" not in manifest


def test_making_a_member_advisory_changes_the_judge_but_asks_no_model_again(fake_llm,
                                                                           tmp_path):
    panel = Panel(contrary_fails=False)
    fake_llm.script = panel
    voting = _evaluate(tmp_path, fake_llm.api_base, "all", "--max-error-share", "0.5")
    asked = len(fake_llm.requests)
    assert asked == ROWS * len(MODELS)
    advisory = _evaluate(tmp_path, fake_llm.api_base, "one", "--max-error-share", "0.5",
                         "--advisory-judge-model", ADVISORY)
    assert voting.exit_code == advisory.exit_code == 0, (voting.output, advisory.output)
    # every member's reply is the same reply: the cache answers it, no call is made
    assert len(fake_llm.requests) == asked
    before, after = (_read(tmp_path, run, "manifest.json")["judge_fingerprint"]
                     for run in ("all", "one"))
    assert before["digest"] != after["digest"]
    assert [m.get("advisory") for m in after["judges"][PREFIX]["members"]] == [
        None, None, None, True]
    # and the rows are voted again: with all four voting the contrary member ties rows the
    # other three decide; advisory, it ties none
    all_rows, one_rows = ({r["request_id"]: r[f"{PREFIX}/rating"]
                           for r in _read(tmp_path, run, "results.jsonl")}
                          for run in ("all", "one"))
    assert None in all_rows.values() and None not in one_rows.values()


def test_calibration_names_the_member_that_disagrees_with_people(fake_llm, tmp_path):
    panel = Panel(contrary_fails=False)
    fake_llm.script = panel
    # the strict member's verdicts are the panel's; the contrary one says the opposite of people
    trio = "openai/planted-honest,openai/planted-contrary,openai/planted-strict"
    result = _evaluate(tmp_path, fake_llm.api_base, "cal", "--no-cache", panel=trio,
                       data=_set(tmp_path, labels=True))
    assert result.exit_code == 0, result.output
    metrics = _read(tmp_path, "cal", "metrics.json")
    assert metrics["calibration/safety/panel/2/agreement"] == 0.0
    assert metrics["calibration/safety/panel/2/kappa_upper"] < metrics[
        "calibration/safety/kappa_lower"]
    entry = next(e for e in _read(tmp_path, "cal", "manifest.json")["calibration"]["judges"]
                 if e["key"] == "safety")
    (line,) = entry["member_suggestions"]
    assert line.startswith("safety panel member 2 (openai/planted-contrary) disagrees with "
                           "people")
    assert line.endswith("--advisory-judge-model openai/planted-contrary (judge.advisory in a "
                         "deployment)")
    assert "panel member 2 (openai/planted-contrary) disagrees" in result.output
    assert "--advisory-judge-model openai/planted-contrary" in _read(tmp_path, "cal",
                                                                     "report.html")


@pytest.mark.parametrize(("advisory", "says"), [
    ("openai/planted-honest,openai/planted-biased", "at least one must vote"),
    ("openai/nobody", "'openai/nobody' is not one of the panel"),
])
def test_a_panel_without_a_voting_member_or_a_stranger_is_refused(fake_llm, tmp_path, advisory,
                                                                  says):
    result = _evaluate(tmp_path, fake_llm.api_base, "bad", "--no-cache", "--advisory-judge-model",
                       advisory, panel="openai/planted-honest,openai/planted-biased")
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output
    assert fake_llm.requests == []


def test_an_advisory_pair_member_above_the_limit_is_named_but_a_voting_one_is_incomplete():
    from flows.run.completeness import assess, pair_panel_shares
    from judges.builtin.pair_panel import PanelShare

    shares = [PanelShare(1, "openai/a", 0, 10, None),
              PanelShare(2, "openai/b", 6, 10, "openai/b: down", advisory=True)]
    advisory = assess(pair_panel_shares(shares), 0.2)
    assert advisory == ("complete", [])
    assert advisory.advisory_failures == (
        "pairwise panel member 2 (advisory): 6 of 10 pairs failed: openai/b: down",)
    # a regression adds the head-to-head's assessment to its own: nothing is lost
    night = assess([], 0.2).plus(advisory).plus(["a shard failed"])
    assert night.status == "incomplete" and night.advisory_failures == advisory.advisory_failures
    voting = assess(pair_panel_shares([shares[1]._replace(advisory=False)]), 0.2)
    assert voting.status == "incomplete" and voting.advisory_failures == ()
