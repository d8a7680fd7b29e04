"""One run, built once (issue 47 item 1): the files that define a run's judges are read once a run.

The counting opener wraps the local filesystem's open, the boundary every judgeflow read of a
local file goes through (judges/storage.py `open_url`), so a second read by any module counts.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml
from fsspec.implementations.local import LocalFileSystem

from flows.compare import compare
from flows.compare_params import CompareParams
from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OFFLINE = JudgeModel(model="judgeflow/offline")


@pytest.fixture
def opened(monkeypatch) -> Counter:
    """How many times each local file was opened, by path."""
    counts: Counter = Counter()
    real_open = LocalFileSystem._open

    def counting_open(self, path, *args, **kwargs):
        counts[str(Path(self._strip_protocol(path)).resolve())] += 1
        return real_open(self, path, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "_open", counting_open)
    return counts


def _published(output: Path, run_id: str) -> tuple[dict, dict]:
    run = output / "s" / run_id
    return (json.loads((run / "manifest.json").read_text()),
            json.loads((run / "metrics.json").read_text()))


def test_an_evaluate_run_reads_its_custom_judges_file_once(opened, tmp_path):
    judges = tmp_path / "judges.yaml"
    judges.write_text(yaml.safe_dump({"judges": [
        {"name": "on_topic", "assessment_type": "ANSWER",
         "instructions": "Does {{ response }} answer {{ request }}?"}]}))
    params = EvaluateParams(data=str(EXAMPLES / "rag_eval.jsonl"), judge=OFFLINE,
                            output=str(tmp_path / "out"), suite="s", run_id="custom",
                            custom_judges=str(judges), aspects=["conciseness"],
                            use_cache=False, chunk_size=2)
    asyncio.run(evaluate(params))
    manifest, metrics = _published(tmp_path / "out", "custom")
    # The run judged with the file's judge: it was read, and the run did not need it again.
    assert "on_topic" in [j["name"] for j in manifest["judges"]]
    assert any(name.startswith("custom/on_topic") or "on_topic" in name for name in metrics)
    assert opened[str(judges.resolve())] == 1


def test_a_compare_run_reads_its_rubric_once(opened, tmp_path):
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(yaml.safe_dump({"criteria": [
        {"name": "helpful", "description": "Answers the question asked", "type": "scale",
         "weight": 1}]}))
    params = CompareParams(data=str(EXAMPLES / "pairs.jsonl"), judge=OFFLINE,
                           output=str(tmp_path / "out"), suite="s", run_id="rubric",
                           rubric=str(rubric), use_cache=False, chunk_size=2)
    asyncio.run(compare(params))
    manifest, _ = _published(tmp_path / "out", "rubric")
    assert manifest["pairwise"]["criteria"] == "fixed"
    assert opened[str(rubric.resolve())] == 1
