import json

import pandas as pd
import pytest

from tasks.dataset.sources import read_table, table_from_rows
from tasks.dataset.validation import InvalidDatasetError, validate_table


def _problems(rows):
    return {
        (p.row_index, p.column): p.problem for p in validate_table(table_from_rows(rows)).problems
    }


def test_three_request_shapes_become_messages():
    rows = [
        {"request": "What is RAG?", "response": "r"},
        {"request": {"messages": [{"role": "user", "content": "Hi"}]}, "response": "r"},
        {
            "request": {
                "query": "And now?",
                "history": [
                    {"role": "user", "content": "First"},
                    {"role": "assistant", "content": "Answer"},
                ],
            },
            "response": "r",
        },
    ]
    validated = validate_table(table_from_rows(rows))
    assert [len(r.messages) for r in validated.rows] == [1, 1, 3]
    assert validated.rows[2].messages[-1].content == "And now?"
    assert validated.rows[2].messages[-1].role == "user"


def test_request_id_is_stable_and_distinct_for_repeated_requests():
    rows = [{"request": "same", "response": "a"}, {"request": "same", "response": "b"}]
    first = [r.request_id for r in validate_table(table_from_rows(rows)).rows]
    again = [r.request_id for r in validate_table(table_from_rows(rows)).rows]
    assert first == again and len(set(first)) == 2


def test_every_problem_at_once_naming_row_and_column():
    problems = _problems(
        [
            {
                "request_id": "a",
                "request": "ok",
                "response": "r",
                "expected_facts": ["x"],
                "expected_response": "y",
            },
            {"request_id": "b", "request": 42, "response": "r"},
            {"request_id": "c", "request": "ok", "response": "r", "expected_facts": "not a list"},
            {
                "request_id": "d",
                "request": "ok",
                "response": "r",
                "retrieved_context": [{"content": "no uri"}],
            },
            {"request_id": "e", "request": "ok"},
            {"request_id": "e", "request": "dup", "response": "r"},
        ]
    )
    assert "not both" in problems[(0, "expected_facts, expected_response")]
    assert "got 42" in problems[(1, "request")]
    assert "list of strings" in problems[(2, "expected_facts")]
    assert "doc_uri" in problems[(3, "retrieved_context")]
    assert "response" in problems[(4, "response")]
    assert "duplicate" in problems[(5, "request_id")]


def test_error_message_names_request_id_and_index():
    validated = validate_table(
        table_from_rows(
            [
                {"request_id": "ok-1", "request": "fine", "response": "r"},
                {"request_id": "bad-7", "request": "", "response": "r"},
            ]
        )
    )
    message = str(InvalidDatasetError(validated.problems, validated.total))
    assert "row 1 (request_id 'bad-7'), column 'request'" in message
    assert [r.request_id for r in validated.rows] == ["ok-1"]


def test_broken_jsonl_line_is_reported_with_its_row(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"request": "a", "response": "b"}\n{"request": "a", oops}\n')
    validated = validate_table(read_table(str(path)))
    assert [(p.row_index, p.column) for p in validated.problems] == [(1, "(row)")]
    assert "not valid JSON" in validated.problems[0].problem
    assert len(validated.rows) == 1


def test_missing_request_column_fails_the_whole_set():
    validated = validate_table(table_from_rows([{"response": "r"}]))
    assert validated.rows == []
    assert any(p.row_index is None and p.column == "request" for p in validated.problems)


def test_csv_with_json_encoded_nested_fields(tmp_path):
    frame = pd.DataFrame(
        [
            {
                "request": "What?",
                "response": "That.",
                "expected_facts": json.dumps(["fact one"]),
                "retrieved_context": json.dumps([{"doc_uri": "d1", "content": "text"}]),
            },
            {
                "request": json.dumps({"messages": [{"role": "user", "content": "Hi"}]}),
                "response": "Hello",
                "expected_facts": "[broken",
                "retrieved_context": "",
            },
        ]
    )
    path = tmp_path / "set.csv"
    frame.to_csv(path, index=False)
    validated = validate_table(read_table(str(path)))
    assert validated.rows[0].expected_facts == ["fact one"]
    assert validated.rows[0].retrieved_context[0].doc_uri == "d1"
    assert [(p.row_index, p.column) for p in validated.problems] == [(1, "expected_facts")]


def test_parquet_round_trip(tmp_path):
    rows = [
        {
            "request": "q1",
            "response": "a1",
            "expected_facts": ["f1", "f2"],
            "retrieved_context": [{"doc_uri": "u1", "content": "c1"}],
        },
        {"request": "q2", "response": "a2", "expected_facts": None, "retrieved_context": None},
    ]
    path = tmp_path / "set.parquet"
    pd.DataFrame(rows).to_parquet(path)
    validated = validate_table(read_table(str(path)))
    assert not validated.problems
    assert validated.rows[0].expected_facts == ["f1", "f2"]
    assert validated.rows[1].expected_facts is None


@pytest.mark.parametrize("name", ["set.txt", "set"])
def test_unknown_format_is_a_clear_error(tmp_path, name):
    from tasks.dataset.table import DatasetReadError

    (tmp_path / name).write_text("x")
    with pytest.raises(DatasetReadError, match="format"):
        read_table(str(tmp_path / name))


def test_trace_document_without_doc_uri_rejects_only_that_row():
    trace = {"info": {"request_id": "t"}, "data": {"spans": [
        {"name": "root", "context": {"span_id": "1", "trace_id": "t"}, "parent_id": None,
         "start_time": 0, "end_time": 1_000_000_000, "attributes": {
             "mlflow.spanType": '"CHAIN"', "mlflow.spanOutputs": '"answer"'}},
        {"name": "retrieve", "context": {"span_id": "2", "trace_id": "t"}, "parent_id": "1",
         "start_time": 1, "end_time": 2, "attributes": {
             "mlflow.spanType": '"RETRIEVER"',
             "mlflow.spanOutputs": json.dumps([{"page_content": "text", "metadata": {}}])}},
    ]}}
    validated = validate_table(table_from_rows([
        {"request_id": "ok", "request": "q", "response": "r"},
        {"request_id": "bad-trace", "request": "q", "trace": json.dumps(trace)},
    ]))
    assert [r.request_id for r in validated.rows] == ["ok"]
    assert [(p.row_index, p.column) for p in validated.problems] == [(1, "trace")]


def test_content_parts_reach_the_judge_as_text_and_stay_parts_for_the_candidate():
    parts = [{"type": "text", "text": "What is on this picture?"},
             {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
    rows = [{"request": {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": parts},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "content": "a cat", "tool_call_id": "c1"},
    ]}, "response": "A cat."}]
    validated = validate_table(table_from_rows(rows))
    assert not validated.problems
    row = validated.rows[0]
    assert row.messages[1].content == parts
    assert row.request_text == (
        "system: Be brief.\nuser: What is on this picture?\n[image_url part not shown]\n"
        "assistant: \ntool: a cat")


@pytest.mark.parametrize("column, meant", [
    ("reponse", "response"), ("expected_respone", "expected_response"),
    ("retreived_context", "retrieved_context"), ("Request", "request"), ("trace_", "trace"),
    ("expected_fact", "expected_facts"),
])
def test_near_misses_of_known_columns_are_recognised(column, meant):
    from tasks.dataset.columns import near_miss

    assert near_miss(column) == meant


@pytest.mark.parametrize("column", [
    "id", "question", "expected", "context", "model", "category", "response_time_ms", "response",
    "tag", "tags", "latency", "request_time",
])
def test_other_columns_are_not_taken_for_typos(column):
    from tasks.dataset.columns import near_miss

    assert near_miss(column) is None


def test_allow_extra_columns_keeps_a_near_miss_as_an_extra_column():
    rows = [{"request": "q", "response": "a", "reponse": "typo kept on purpose"}]
    refused = validate_table(table_from_rows(rows))
    assert [(p.row_index, p.column) for p in refused.problems] == [(None, "reponse")]
    kept = validate_table(table_from_rows(rows), allow_extra_columns=True)
    assert not kept.problems and kept.rows[0].extra == {"reponse": "typo kept on purpose"}


def test_a_missing_response_column_is_one_problem_unless_responses_are_generated():
    rows = [{"request": f"q{i}"} for i in range(5)]
    problems = validate_table(table_from_rows(rows)).problems
    assert [(p.row_index, p.column) for p in problems] == [(None, "response")]
    assert not validate_table(table_from_rows(rows), responses_generated=True).problems


def test_a_single_problem_reads_as_one_sentence():
    validated = validate_table(table_from_rows([{"request": "q", "reponse": "a"}]))
    message = str(InvalidDatasetError(validated.problems, validated.total, "set.jsonl"))
    assert message == (
        "invalid evaluation set set.jsonl: the dataset, column 'reponse': not a known column; "
        "did you mean 'response'? Rename it, or pass --allow-extra-columns (flow parameter "
        "allow_extra_columns) to keep it; nothing was judged or published")


def test_a_short_csv_row_has_no_value_where_cells_are_missing(tmp_path):
    path = tmp_path / "set.csv"
    path.write_text("request,response,expected_response\nq1,a1,e1\nq2,a2\n")
    validated = validate_table(read_table(str(path)))
    assert not validated.problems
    assert validated.rows[1].expected_response is None


def test_a_json_table_of_unequal_columns_is_a_file_problem(tmp_path):
    from tasks.dataset.table import DatasetReadError

    path = tmp_path / "set.json"
    path.write_text(json.dumps({"request": ["a", "b"], "response": ["x"]}))
    with pytest.raises(DatasetReadError, match="not a table of equal-length columns"):
        read_table(str(path))
