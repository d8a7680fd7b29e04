"""A corpus of malformed evaluation sets, each with the words its refusal must contain.

Every case is written into a test's temporary folder by `write()`, in JSONL, JSON, CSV or
Parquet, so that the corpus is readable here rather than hidden in binary files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pandas as pd


class Malformed(NamedTuple):
    """A malformed set: file name, how to write it, and phrases the refusal must contain."""

    name: str
    file: str
    write: Callable[[Path], None]
    expect: tuple[str, ...]


def _jsonl(*rows) -> Callable[[Path], None]:
    lines = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    return lambda path: path.write_text(lines, encoding="utf-8")


def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _parquet(rows: list[dict]) -> Callable[[Path], None]:
    return lambda path: pd.DataFrame(rows).to_parquet(path)


OK = {"request": "What is the capital of France?", "response": "Paris."}
TRACE_NO_SPANS = json.dumps({"info": {}, "data": {"spans": []}})

CORPUS = [
    Malformed("role-wizard", "set.jsonl", _jsonl(
        OK, {"request": {"messages": [{"role": "wizard", "content": "hi"}]}, "response": "a"}),
        ("row 1, column 'request'", "role 'wizard'", "system, user, assistant, tool")),
    Malformed("content-number", "set.jsonl", _jsonl(
        {"request": {"messages": [{"role": "user", "content": 42}]}, "response": "a"}),
        ("row 0, column 'request'", "messages[0].content must be a string or a list")),
    Malformed("content-part-unknown", "set.jsonl", _jsonl(
        {"request": {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
         "response": "a"}),
        ("row 0, column 'request'", "is not an OpenAI content part")),
    Malformed("content-part-text-missing", "set.jsonl", _jsonl(
        {"request": {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
         "response": "a"}),
        ("row 0, column 'request'", "needs a string 'text'")),
    Malformed("history-not-list", "set.jsonl", _jsonl(
        {"request": {"query": "and now?", "history": "earlier turns"}, "response": "a"}),
        ("row 0, column 'request'", "history must be a list")),
    Malformed("messages-empty", "set.jsonl", _jsonl(
        OK, OK, {"request": {"messages": []}, "response": "a"}),
        ("row 2, column 'request'", "messages is empty")),
    Malformed("messages-blank", "set.jsonl", _jsonl(
        {"request": {"messages": [{"role": "user", "content": "  "}]}, "response": "a"}),
        ("row 0, column 'request'", "the request is empty")),
    Malformed("query-empty", "set.jsonl", _jsonl({"request": {"query": ""}, "response": "a"}),
              ("row 0, column 'request'", "query must be a non-empty string")),
    Malformed("request-blank", "set.jsonl", _jsonl({"request": "   ", "response": "a"}),
              ("row 0, column 'request'", "the request is empty")),
    Malformed("request-null", "set.jsonl", _jsonl(OK, {"request": None, "response": "a"}),
              ("row 1, column 'request'", "a value is required")),
    Malformed("facts-empty", "set.jsonl", _jsonl({**OK, "expected_facts": []}),
              ("row 0, column 'expected_facts'", "nothing to judge against")),
    Malformed("facts-not-list", "set.jsonl", _jsonl({**OK, "expected_facts": "Paris"}),
              ("row 0, column 'expected_facts'", "expected a list of strings; got 'Paris'")),
    Malformed("expected-response-blank", "set.jsonl", _jsonl({**OK, "expected_response": " "}),
              ("row 0, column 'expected_response'", "blank")),
    Malformed("typo-reponse", "set.jsonl", _jsonl(*[{"request": f"q{i}", "reponse": "a"}
                                                    for i in range(10)]),
              ("column 'reponse'", "did you mean 'response'?", "--allow-extra-columns")),
    Malformed("typo-expected-respone", "set.jsonl", _jsonl({**OK, "expected_respone": "Paris"}),
              ("column 'expected_respone'", "did you mean 'expected_response'?")),
    Malformed("typo-retreived-context", "set.jsonl", _jsonl(
        {**OK, "retreived_context": [{"doc_uri": "d1", "content": "c"}]}),
        ("column 'retreived_context'", "did you mean 'retrieved_context'?")),
    Malformed("no-request-column", "set.jsonl", _jsonl({"question": "q", "response": "a"}),
              ("column 'request': column is missing",)),
    Malformed("no-response-column", "set.jsonl", _jsonl({"request": "q1"}, {"request": "q2"}),
              ("column 'response': column is missing", "--candidate-model")),
    Malformed("both-expected", "set.jsonl", _jsonl(
        {**OK, "expected_facts": ["Paris"], "expected_response": "Paris"}),
        ("row 0, column 'expected_facts, expected_response'", "not both")),
    Malformed("duplicate-request-id", "set.jsonl", _jsonl(
        {**OK, "request_id": "a"}, {**OK, "request_id": "a"}),
        ("column 'request_id'", "duplicate request_id 'a'")),
    Malformed("chunk-without-uri", "set.jsonl", _jsonl(
        {**OK, "retrieved_context": [{"doc_uri": "d1"}, {"content": "no uri"}]}),
        ("row 0, column 'retrieved_context'", "chunk 1 has no doc_uri")),
    Malformed("response-number", "set.jsonl", _jsonl({"request": "q", "response": 5}),
              ("row 0, column 'response'", "expected a string")),
    Malformed("line-not-json", "set.jsonl", _jsonl(OK, '{"request": "q", oops}'),
              ("row 1, column '(row)'", "line is not valid JSON")),
    Malformed("line-not-object", "set.jsonl", _jsonl(OK, '["q", "a"]'),
              ("row 1, column '(row)'", "expected a JSON object")),
    Malformed("jsonl-not-utf8", "set.jsonl", _bytes(b'{"request": "q", "response": "a"}\n'
                                                     b'{"request": "caf\xe9", "response": "a"}\n'),
              ("set.jsonl", "is not UTF-8 text", "line 2")),
    Malformed("empty-file", "set.jsonl", _bytes(b""), ("the set has no rows",)),
    Malformed("trace-no-spans", "set.jsonl", _jsonl({"request": "q", "trace": TRACE_NO_SPANS}),
              ("row 0, column 'trace'", "no spans")),
    Malformed("trace-not-json", "set.jsonl", _jsonl({"request": "q", "trace": "not a trace"}),
              ("row 0, column 'trace'", "trace is not valid JSON")),
    Malformed("json-not-json", "set.json", _bytes(b'[{"request": "q", "response": "a"},'),
              ("set.json", "is not valid JSON", "line 1")),
    Malformed("json-scalar", "set.json", _bytes(b'"just a string"'),
              ("set.json", "a .json set is a list of row objects")),
    Malformed("json-row-not-object", "set.json", _bytes(b'[{"request": "q", "response": "a"}, 7]'),
              ("row 1, column '(row)'", "expected an object")),
    Malformed("csv-open-quote", "set.csv", _bytes(b'request,response\n"What is, it,a\n'),
              ("set.csv", "is not valid CSV", "quoting")),
    Malformed("csv-extra-field", "set.csv", _bytes(b"request,response\nq,a,extra\nq2,b\n"),
              ("set.csv", "Expected 2 fields in line 2, saw 3")),
    Malformed("csv-bad-json-cell", "set.csv", _bytes(
        b'request,response,expected_facts\nq,a,"[""Paris"""\n'),
        ("row 0, column 'expected_facts'", "JSON-encoded value")),
    Malformed("csv-empty", "set.csv", _bytes(b""), ("set.csv", "is empty")),
    Malformed("csv-latin1", "set.csv", _bytes("request,response\ncafé,a\n".encode("latin-1")),
              ("set.csv", "is not UTF-8 text")),
    Malformed("parquet-corrupt", "set.parquet", _bytes(b"PAR1 this is not parquet PAR1"),
              ("set.parquet", "is not a readable Parquet file")),
    Malformed("parquet-typo", "set.parquet", _parquet([{"request": "q", "reponse": "a"}]),
              ("column 'reponse'", "did you mean 'response'?")),
    Malformed("parquet-empty-facts", "set.parquet", _parquet(
        [{**OK, "expected_facts": ["Paris"]}, {**OK, "expected_facts": []}]),
        ("row 1, column 'expected_facts'", "nothing to judge against")),
    Malformed("missing-file", "absent.jsonl", lambda path: None,
              ("dataset not found", "absent.jsonl", "check the path")),
    Malformed("unknown-format", "set.txt", _bytes(b"request,response\n"),
              ("cannot tell the format", "jsonl, json, csv, parquet")),
]
