"""A published run lets a user audit every verdict, and pairwise runs read like Nova's output."""

import asyncio
import json
from pathlib import Path

from flows.compare import compare
from flows.compare_params import CompareParams
from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from judges.result_names.pairwise import NOVA_FIELDS
from tasks.report.nova import NOVA_TASK
from tests.planted import PlantedJudge

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROWS = [
    {"request_id": "plain", "request": "q1", "response": "fine"},
    {"request_id": "garbled", "request": "q2", "response": "fine #safety=garbage"},
    {"request_id": "refused", "request": "q3", "response": "bad #safety=no"},
]


def test_every_judgment_is_in_calls_jsonl_with_its_raw_replies(fake_llm, tmp_path):
    fake_llm.script = PlantedJudge()
    judge = JudgeModel(model="openai/planted", api_base=fake_llm.api_base, backoff_seconds=0.01)
    asyncio.run(evaluate(EvaluateParams(rows=ROWS, judge=judge, output=str(tmp_path),
                                        suite="a", run_id="r", use_cache=False,
                                        judges=["safety"])))
    run_dir = tmp_path / "a" / "r"
    calls = [json.loads(x) for x in (run_dir / "calls.jsonl").read_text().splitlines()]
    by_id = {c["request_id"]: c for c in calls}
    assert sorted(by_id) == ["garbled", "plain", "refused"]
    garbled = by_id["garbled"]
    assert garbled["judge"] == "safety" and garbled["source"] == "model"
    assert len(garbled["replies"]) == 2  # the unusable reply, then the re-ask's
    assert garbled["replies"][0] == "I would say it is fine, really."
    assert (garbled["outcome"], garbled["verdict"]) == ("verdict", "yes")
    assert json.loads(by_id["refused"]["replies"][0])["rating"] == "no"
    assert by_id["refused"]["prompt_hash"] and by_id["refused"]["model"] == "openai/planted"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "calls.jsonl" in manifest["files"]


def test_pairwise_run_writes_nova_results_in_novas_structure(tmp_path):
    judge = JudgeModel(model="judgeflow/offline")
    asyncio.run(compare(CompareParams(data=str(EXAMPLES / "pairs.jsonl"), judge=judge,
                                      output=str(tmp_path), suite="n", run_id="r")))
    run_dir = tmp_path / "n" / "r"
    nova = json.loads((run_dir / "nova_results.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(nova) == {"config_general", "results", "versions"}
    assert set(nova["results"]) == {NOVA_TASK} and set(nova["versions"]) == {NOVA_TASK}
    block = nova["results"][NOVA_TASK]
    assert set(block) == set(NOVA_FIELDS)
    for name in NOVA_FIELDS:
        assert block[name] == (None if metrics[name] is None else float(metrics[name]))
    config = nova["config_general"]
    assert config["model_name"] == "judgeflow/offline"
    assert isinstance(config["job_id"], int) and config["end_time"] >= config["start_time"]
    assert isinstance(config["total_evaluation_time_secondes"], str)
