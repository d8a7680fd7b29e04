"""Labels as input: the column vocabulary, labels checked against the judges, a labels file."""

from __future__ import annotations

import json
import re

import pytest

from flows.params import EvaluateParams, JudgeModel
from flows.run.calibration import label_judges
from tasks.dataset.columns import near_miss
from tasks.dataset.labels import LabelsFileError, with_labels
from tasks.dataset.normalise import stable_request_id
from tasks.dataset.sources import table_from_rows
from tasks.dataset.validation import validate_table


@pytest.mark.parametrize("column, meant", [
    ("human_label", "human_labels"), ("Human_Labels", "human_labels"),
    ("human_preferences", "human_preference"), ("Tags", "tags"),
])
def test_label_and_tag_columns_are_in_the_vocabulary(column, meant):
    assert near_miss(column) == meant


@pytest.mark.parametrize("column", ["tag", "tags", "human_labels", "labels", "preference"])
def test_short_or_distinct_names_are_not_typos(column):
    assert near_miss(column) is None


def _params(tmp_path, **fields) -> EvaluateParams:
    return EvaluateParams(rows=[{"request": "q"}], judge=JudgeModel(model="judgeflow/offline"),
                          output=str(tmp_path), **fields)


def test_a_shared_name_must_be_qualified_and_a_retrieval_judge_takes_a_list(tmp_path):
    judges_file = tmp_path / "judges.yaml"
    judges_file.write_text("- name: cites\n  assessment_type: RETRIEVAL\n"
                           "  instructions: 'Does {{ retrieved_context }} cite a source?'\n")
    kinds = label_judges(_params(tmp_path, aspects=["correctness"],
                                 custom_judges=str(judges_file)))
    assert kinds["cites"] == "chunk" and kinds["safety"] == "row"
    assert kinds["llm_judged/correctness"] == kinds["aspect_critic/correctness"] == "row"
    assert "correctness" not in kinds
    chunks = [{"doc_uri": "a", "content": "x"}, {"doc_uri": "b", "content": "y"}]
    rows = [{"request": "q", "response": "r", "retrieved_context": chunks,
             "human_labels": {"correctness": "yes"}},
            {"request": "q", "response": "r", "retrieved_context": chunks,
             "human_labels": {"aspect_critic/correctness": "no", "cites": ["yes", None]}},
            {"request": "q", "response": "r", "retrieved_context": chunks,
             "human_labels": {"cites": "yes"}}]
    problems = validate_table(table_from_rows(rows), label_judges=kinds).problems
    assert [(p.row_index, p.column) for p in problems] == [(0, "human_labels"),
                                                          (2, "human_labels")]
    assert "is shared by several judges of this run: write 'aspect_critic/correctness' or " \
           "'llm_judged/correctness'" in problems[0].problem
    assert "rates each retrieved chunk" in problems[1].problem


def test_a_labels_file_is_joined_on_request_id_given_or_derived(tmp_path):
    table = table_from_rows([{"request_id": "a", "request": "q1", "response": "r"},
                             {"request": "q2", "response": "r"}])
    path = tmp_path / "labels.jsonl"
    derived = stable_request_id("q2")
    path.write_text(json.dumps({"request_id": "a", "human_labels": {"safety": "no"}}) + "\n"
                    + json.dumps({"request_id": derived, "human_labels": {"safety": "yes"}}))
    joined = with_labels(table, str(path))
    assert [r.get("human_labels") for r in joined.records] == [{"safety": "no"},
                                                               {"safety": "yes"}]
    validated = validate_table(joined)
    assert not validated.problems
    assert validated.rows[1].extra["human_labels"] == {"safety": "yes"}
    assert table.records[0].get("human_labels") is None  # the table read is left as it was


@pytest.mark.parametrize("lines, message", [
    ([{"request_id": "zzz", "human_labels": {}}], "names request_id(s) the set lacks: 'zzz'"),
    ([{"human_labels": {}}], "row 0 has no request_id"),
    ([{"request_id": "a", "label": "yes"}], "has unknown keys ['label']"),
    ([{"request_id": "a"}, {"request_id": "a"}], "request_id 'a' is repeated"),
    ([{"request_id": "b", "human_labels": {"safety": "no"}}], "both in the set and in the"),
])
def test_a_labels_file_that_cannot_be_joined_is_refused(tmp_path, lines, message):
    table = table_from_rows([{"request_id": "a", "request": "q", "response": "r"},
                             {"request_id": "b", "request": "q", "response": "r",
                              "human_labels": {"safety": "yes"}}])
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(LabelsFileError, match=re.escape(message)):
        with_labels(table, str(path))


def test_labels_in_a_csv_set_or_labels_file_are_json_cells(tmp_path):
    from tasks.dataset.sources import read_table

    data = tmp_path / "set.csv"
    data.write_text('request_id,request,response,human_labels\n'
                    'a,q,r,"{""safety"": ""no""}"\nb,q,r,\n')
    validated = validate_table(read_table(str(data)))
    assert not validated.problems
    assert validated.rows[0].extra["human_labels"] == {"safety": "no"}
    labels = tmp_path / "labels.csv"
    labels.write_text('request_id,human_labels\nb,"{""safety"": ""yes""}"\n')
    joined = with_labels(read_table(str(data)), str(labels))
    assert joined.records[1]["human_labels"] == {"safety": "yes"}
