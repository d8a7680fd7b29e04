"""Every URL and storage option a run opens passes one door: plain paths and s3:// only."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from flows.cli import app
from flows.compare_params import CompareParams
from flows.params import EvaluateParams, JudgeModel
from judges.builtin.custom import load_custom_judges
from judges.cache import ReplyCache
from judges.storage import StorageRefused, check_storage_options, check_url, open_url
from tasks.dataset.sources import iter_batches
from tasks.regression.gates import load_gates

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
runner = CliRunner()


def _write_chain(tmp_path: Path) -> tuple[str, dict]:
    """The reproduced attack: a cached copy of a remote file written where the caller says."""
    url = "simplecache::http://127.0.0.1:9/x.json?a=/sitecustomize.py"
    options = {"simplecache": {"cache_storage": str(tmp_path / "site-packages"),
                               "same_names": True}}
    return url, options


def test_a_chained_url_is_refused_before_anything_is_written(tmp_path):
    url, options = _write_chain(tmp_path)
    with pytest.raises(StorageRefused, match="chains filesystems"):
        list(iter_batches(url, options))
    with pytest.raises(ValidationError, match="chains filesystems"):
        EvaluateParams(data=url, judge=JudgeModel(model="judgeflow/offline"),
                       output=str(tmp_path / "out"))
    with pytest.raises(ValidationError, match="not accepted"):
        EvaluateParams(data=str(EXAMPLE), judge=JudgeModel(model="judgeflow/offline"),
                       storage_options=options)
    assert not (tmp_path / "site-packages").exists()


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/latest/meta-data/doc#.json",
    "https://example.com/set.jsonl",
    "memory://set.jsonl",
    "reference://x.csv",
    "ftp://host/set.csv",
    "zip://set.jsonl::file:///tmp/a.zip",
])
def test_only_plain_paths_and_s3_are_opened(url):
    with pytest.raises(StorageRefused):
        check_url(url)
    with pytest.raises(StorageRefused):
        open_url(url)


def test_an_operator_may_allow_another_protocol(monkeypatch):
    monkeypatch.setenv("JUDGEFLOW_STORAGE_PROTOCOLS", "memory")
    assert check_url("memory://x/set.jsonl") == "memory://x/set.jsonl"
    with pytest.raises(StorageRefused):
        check_url("simplecache::memory://x/set.jsonl")


@pytest.mark.parametrize("options", [
    {"fo": "/etc/passwd"},
    {"key": "AKIA"},
    {"secret": "x"},
    {"cache_storage": "/tmp"},
    {"target_protocol": "http"},
    {"client_kwargs": {"aws_secret_access_key": "x"}},
    {"config_kwargs": {"proxies": {"https": "http://evil:8080"}}},
    {"endpoint_url": 5},
    {"anon": "yes"},
])
def test_storage_options_come_from_an_allow_list(options):
    with pytest.raises(StorageRefused):
        check_storage_options(options)


def test_usual_s3_options_pass():
    options = {"endpoint_url": "http://127.0.0.1:9000", "anon": False, "profile": "ci",
               "client_kwargs": {"region_name": "eu-west-1"},
               "config_kwargs": {"retries": {"total_max_attempts": 2, "mode": "standard"},
                                 "connect_timeout": 3}}
    assert check_storage_options(options) == options


def test_files_named_by_parameters_go_through_the_door(tmp_path):
    for loader in (lambda u: load_custom_judges(u), lambda u: load_gates(u, {})):
        with pytest.raises((StorageRefused, ValueError), match="protocol|chains"):
            loader("http://127.0.0.1:9/judges.yaml")
    with pytest.raises(StorageRefused):
        ReplyCache("http://127.0.0.1:9/cache")


def test_the_command_refuses_a_chained_set_in_one_line(tmp_path):
    url, _ = _write_chain(tmp_path)
    result = runner.invoke(app, ["evaluate", url, "--judge-model", "judgeflow/offline",
                                 "--output", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "chains filesystems" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_the_command_refuses_an_unknown_storage_option(tmp_path):
    result = runner.invoke(app, ["evaluate", str(EXAMPLE), "--judge-model", "judgeflow/offline",
                                 "--output", str(tmp_path / "out"),
                                 "--storage-option", "fo=/etc/passwd"])
    assert result.exit_code == 2, result.output
    assert "'fo' is not accepted" in result.output
    assert not (tmp_path / "out").exists()


def test_compare_sides_are_checked_too(tmp_path):
    with pytest.raises(ValidationError, match="protocol"):
        CompareParams(baseline="http://127.0.0.1:9/a.jsonl", candidate=str(EXAMPLE),
                      judge=JudgeModel(model="judgeflow/offline"))
    assert json.loads(json.dumps(CompareParams(
        data=str(EXAMPLE), judge=JudgeModel(model="judgeflow/offline")).model_dump()))
