"""Each option is declared once, in its parameter model's field: the CLI is made of them."""

import subprocess
import sys
from typing import Annotated

import click
import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from flows.cli import COMMANDS, app
from flows.commands.options import (
    ModelCommand,
    command_options,
    fields_of,
    model_options,
    undeclared,
)
from flows.compare_params import CompareParams
from flows.flags import Flag, Nested
from flows.params import (
    CandidateModel,
    EvaluateParams,
    JudgeModel,
    RegressionParams,
    RejudgeParams,
)
from judges.model.settings import LLMSettings, ModelKnobs

runner = CliRunner()
FLOW_MODELS = [EvaluateParams, CompareParams, RegressionParams, RejudgeParams]


def _built(name: str) -> click.Command:
    group = typer.main.get_command(app)
    return group.get_command(click.Context(group), name)


def _description(model: type, path: tuple[str, ...]) -> str:
    """A field's description read straight from pydantic, by its path through nested models."""
    info = model.model_fields[path[0]]
    if len(path) == 1:
        return info.description
    nested = info.annotation
    nested = next((a for a in getattr(nested, "__args__", ()) if a is not type(None)), nested)
    return nested.model_fields[path[1]].description


def test_every_field_of_every_flow_model_has_a_flag_or_is_form_only():
    assert {command._model() for _, command in COMMANDS
            if isinstance(command, ModelCommand)} == set(FLOW_MODELS)
    for model in FLOW_MODELS:
        assert undeclared(model) == [], model.__name__


def test_a_new_field_without_a_flag_fails_and_with_one_reaches_the_command_line():
    class Undeclared(EvaluateParams):
        new_knob: int = Field(3, description="A knob someone forgot to give a flag")

    assert undeclared(Undeclared) == ["new_knob"]
    with pytest.raises(TypeError, match="new_knob"):
        command_options(Undeclared)

    class Declared(EvaluateParams):
        new_knob: Annotated[int, Flag()] = Field(3, description="A knob with a flag")

    option = command_options(Declared).parameters["new_knob"]
    assert option.default == 3
    assert option.annotation.__metadata__[0].help == "A knob with a flag"


@pytest.mark.parametrize("name", ["evaluate", "compare", "regression", "rejudge", "estimate"])
def test_each_option_s_help_is_its_field_s_description(name):
    command = dict(COMMANDS)[name]
    model = command._model()
    by_name = {o.name: o.path for o in model_options(model, command._skip)}
    params = {p.name: p for p in _built(name).params}
    assert set(by_name) <= set(params)
    for option, path in by_name.items():
        assert params[option].help == _description(model, path), option
    # Only the command line's own options (progress display, JUnit file) have no field.
    assert set(params) - set(by_name) <= {"no_progress", "junit", "help"}


def test_regression_takes_strict_ties_and_the_run_gets_it(tmp_path):
    command = _built("regression")
    assert "--strict-ties" in runner.invoke(app, ["regression", "--help"]).output
    context = command.make_context("regression", [
        "set.jsonl", "--judge-model", "judgeflow/offline", "--gates", "gates.yaml",
        "--strict-ties"])
    params = RegressionParams(**fields_of(RegressionParams, context.params))
    assert params.strict_ties is True
    context = command.make_context("regression", [
        "set.jsonl", "--judge-model", "judgeflow/offline", "--gates", "gates.yaml"])
    assert RegressionParams(**fields_of(RegressionParams, context.params)).strict_ties is False


def test_the_candidate_takes_the_judge_s_window_and_its_own_attempts():
    context = _built("evaluate").make_context("evaluate", [
        "set.jsonl", "--judge-model", "openai/j", "--candidate-model", "openai/c",
        "--concurrency", "7", "--max-attempts", "4", "--price-per-mtok", "1,2"])
    params = EvaluateParams(**fields_of(EvaluateParams, context.params))
    assert (params.candidate.concurrency, params.candidate.max_attempts) == (7, 4)
    assert params.judge.price_per_mtok == (1.0, 2.0) and params.candidate.price_per_mtok is None
    assert params.candidate.rpm is None  # form-only for the candidate


def test_one_base_declares_the_knobs_of_the_judge_the_candidate_and_the_calls():
    for model in (JudgeModel, CandidateModel, LLMSettings):
        assert issubclass(model, ModelKnobs)
        for knob in ("api_base", "temperature", "concurrency", "rpm", "max_tokens"):
            assert model.model_fields[knob].description == \
                ModelKnobs.model_fields[knob].description, (model, knob)
    holder = [m for m in EvaluateParams.model_fields["candidate"].metadata
              if isinstance(m, Nested)]
    assert holder and holder[0].optional_unless == "candidate_model"


def test_judgeflow_help_imports_no_parameter_model():
    code = ("import sys\nfrom flows.cli import main\nsys.argv = ['judgeflow', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('LOADED', 'pydantic' in sys.modules, 'flows.params' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "evaluate" in out and "regression" in out
    assert "LOADED False False" in out
