"""Custom judges' instructions are data: template injection is refused before any call."""

import asyncio
import json
from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2.sandbox import SecurityError
from typer.testing import CliRunner

import flows.evaluate  # noqa: F401 - binds Prefect's log handler outside CliRunner (test_cli.py)
from flows.cli import app
from flows.evaluate import evaluate
from flows.params import EvaluateParams, JudgeModel
from flows.run.kind_specs import rebuild_plan
from judges.builtin.custom import CustomJudgeDefinition, build_custom_judge, load_custom_judges
from judges.builtin.template_sandbox import CustomJudgeError, template_sandbox
from judges.rows import Chunk, EvalRow, Message
from tasks.storage.shard_inputs import PlanSpec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_eval.jsonl"
runner = CliRunner()

CALL = "a function or method call"
# Payloads that would run `touch MARKER` on the worker if rendered unsandboxed, with the
# construct the refusal must name (the outermost one the template uses).
CODE_PAYLOADS = [
    ("{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}", CALL),
    ("{{ joiner.__init__.__globals__.os.system('touch MARKER') }}", CALL),
    ("{{ namespace.__init__.__globals__.os.popen('touch MARKER').read() }}", CALL),
    ("{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('touch MARKER') }}",
     CALL),
    ("{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}", CALL),
    ("{{ lipsum.__globals__.os.system('touch MARKER') }}", CALL),
    ("{% for c in ''.__class__.__mro__[1].__subclasses__() %}"
     "{% if c.__name__ == 'Popen' %}{{ c('touch MARKER', shell=True) }}{% endif %}{% endfor %}",
     "{% for %}"),
    ("{% set os = cycler.__init__.__globals__.os %}{{ os.system('touch MARKER') }}", "{% set %}"),
    ("{% with p = lipsum.__globals__.os.popen %}{{ p('touch MARKER') }}{% endwith %}",
     "{% with %}"),
    ("{% macro m() %}{{ joiner.__init__.__globals__.os.system('touch MARKER') }}{% endmacro %}"
     "{{ m() }}", "{% macro %}"),
]
# Payloads that read files, reach Python objects or exhaust memory.
OTHER_PAYLOADS = [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", CALL),
    ("{% include '/etc/passwd' %}", "{% include %}"),
    ("{% import 'report.html.j2' as x %}{{ request }}", "{% import %}"),
    ("{% from '_system.j2' import x %}", "{% from ... import %}"),
    ("{% extends 'custom.j2' %}", "{% extends %}"),
    ("{{ request|attr('__class__') }}", "the filter 'attr'"),
    ("{{ range(10**9)|list }}", "the filter 'list'"),
    ("{{ 'a' * 10**9 }}", "the operator '*'"),
    ("{{ request ** 99999 }}", "the operator '**'"),
    ("{{ request.__class__ }}", "attribute access"),
    ("{{ request['__class__'] }}", "item access"),
    ("{{ cycler }}", "the name 'cycler'"),
    ("{{ self }}", "the name 'self'"),
    ("{% filter upper %}{{ request }}{% endfilter %}", "{% filter %}"),
    ("{% if request is sameas response %}x{% endif %}", "the test 'sameas'"),
    ("{{ request | upper }}", "the filter 'upper'"),
    ("{{ '{0.__class__}'.format(request) }}", CALL),
]
PAYLOADS = CODE_PAYLOADS + OTHER_PAYLOADS


def _judges_file(tmp_path: Path, instructions: str, name: str = "evil") -> Path:
    path = tmp_path / "judges.yaml"
    path.write_text(yaml.safe_dump({"judges": [
        {"name": name, "assessment_type": "ANSWER", "instructions": instructions}]}))
    return path


def _armed(template: str, tmp_path: Path) -> tuple[str, Path]:
    """The payload aimed at a marker file under tmp_path, and that file."""
    marker = tmp_path / "pwned"
    return template.replace("MARKER", str(marker)), marker


@pytest.mark.parametrize("template, construct", PAYLOADS)
def test_loading_a_judge_with_code_in_its_template_is_refused(template, construct, tmp_path):
    template, marker = _armed(template, tmp_path)
    path = _judges_file(tmp_path, template)
    with pytest.raises(CustomJudgeError) as error:
        load_custom_judges(str(path))
    message = str(error.value)
    assert construct in message
    assert "'evil'" in message and str(path) in message  # which judge, which file
    assert "use only {{ field }}" in message and "request, response" in message  # the fix
    assert "\n" not in message
    # The same check when a definition arrives without a file (a shard worker's plan.json).
    definition = CustomJudgeDefinition(name="evil", assessment_type="ANSWER",
                                       instructions=template)
    with pytest.raises(CustomJudgeError, match="'evil'") as error:
        build_custom_judge(definition, {"request", "response"})
    assert construct in str(error.value)
    assert not marker.exists()


@pytest.mark.parametrize("template, construct", PAYLOADS)
def test_the_command_exits_2_in_one_line_and_publishes_nothing(template, construct, tmp_path):
    template, marker = _armed(template, tmp_path)
    path = _judges_file(tmp_path, template)
    out = tmp_path / "out"
    result = runner.invoke(app, [
        "evaluate", str(EXAMPLE), "--judge-model", "judgeflow/offline",
        "--custom-judges", str(path), "--output", str(out),
    ])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert construct in lines[0] and "Traceback" not in result.output
    assert not out.exists()
    assert not marker.exists()


@pytest.mark.parametrize("template, construct", CODE_PAYLOADS[:3])
def test_the_flow_refuses_too_without_the_command_line(template, construct, fake_llm, tmp_path):
    # Deployments start the flow without the command line's preflight.
    template, marker = _armed(template, tmp_path)
    params = EvaluateParams(
        data=str(EXAMPLE), judge=JudgeModel(model="openai/planted", api_base=fake_llm.api_base),
        output=str(tmp_path / "out"), suite="s", run_id="r", use_cache=False,
        custom_judges=str(_judges_file(tmp_path, template)),
    )
    with pytest.raises(CustomJudgeError, match="not a valid template"):
        asyncio.run(evaluate(params))
    assert fake_llm.requests == []
    assert not (tmp_path / "out" / "s" / "r" / "results.jsonl").exists()
    assert not marker.exists()


def test_a_shard_worker_refuses_a_plan_carrying_code(tmp_path):
    template, marker = _armed(CODE_PAYLOADS[0][0], tmp_path)
    spec = PlanSpec(judges=[], metrics=[], fields=["request", "response"], custom_judges=[
        {"name": "evil", "assessment_type": "ANSWER", "instructions": template}])
    with pytest.raises(CustomJudgeError, match=f"custom judge 'evil'.*{CALL}"):
        rebuild_plan(spec)
    assert not marker.exists()


@pytest.mark.parametrize("template", [
    "{{ request.__class__ }}",
    "{{ request.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "{{ joiner.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ request.upper.__self__ }}",
    "{{ '{0.__class__.__mro__}'.format(request) }}",
    "{{ request.format.__self__.__class__ }}",
    "{{ 'a' * 10**9 }}",
])
def test_the_sandbox_refuses_attribute_walks_even_unchecked(template, tmp_path):
    template, marker = _armed(template, tmp_path)
    with pytest.raises(SecurityError):
        template_sandbox().from_string(template).render(request="x")
    assert not marker.exists()


@pytest.mark.parametrize("template", [
    "{% include '/etc/passwd' %}",
    "{% import 'report.html.j2' as x %}",
    "{% extends 'custom.j2' %}",
    "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
    "{{ range(10**9)|list }}",
    "{{ request|attr('__class__') }}",
])
def test_the_sandbox_has_no_loader_globals_or_filters(template, tmp_path):
    template, marker = _armed(template, tmp_path)
    # Without a loader jinja2 raises TypeError ("no loader for this environment specified").
    with pytest.raises((jinja2.TemplateError, TypeError)):
        template_sandbox().from_string(template).render(request="x")
    assert not marker.exists()


def test_a_legitimate_template_renders_its_fields_inside_untrusted_blocks(tmp_path):
    instructions = (
        "Does the response answer {{ request }}?\n{{ response }}\n"
        "{% if expected_response is defined and not (expected_response is none) %}"
        "Expected: {{ expected_response }}{% else %}No reference.{% endif %}\n"
        "{{ 'Ticket: ' ~ ticket }}"
    )
    path = _judges_file(tmp_path, instructions, name="answers")
    [definition] = load_custom_judges(str(path))
    available = {"request", "response", "expected_response", "ticket", "retrieved_context"}
    judge = build_custom_judge(definition, available)
    assert set(judge.fields) == {"request", "response", "expected_response", "ticket"}
    row = EvalRow(row_index=0, request_id="a", request="Where is Paris?",
                  messages=[Message(role="user", content="Where is Paris?")],
                  response="In France {{ 7*7 }}", expected_response="France",
                  retrieved_context=[Chunk(doc_uri="d1", content="Paris is in France")],
                  extra={"ticket": "T-1"})
    user = judge.render(row)[1]["content"]
    assert "Does the response answer <untrusted-request>\nWhere is Paris?\n</untrusted-request>?"\
        in user
    # A field's text is data too: a template inside it is not rendered.
    assert "<untrusted-response>\nIn France {{ 7*7 }}\n</untrusted-response>" in user
    assert "Expected: <untrusted-expected_response>\nFrance\n</untrusted-expected_response>" \
        in user
    assert "Ticket: <untrusted-ticket>\nT-1\n</untrusted-ticket>" in user


def test_a_reserved_name_is_refused_even_as_a_column(tmp_path):
    definition = CustomJudgeDefinition(name="x", assessment_type="ANSWER",
                                       instructions="{{ namespace }}")
    with pytest.raises(CustomJudgeError, match="the name 'namespace'"):
        build_custom_judge(definition, {"namespace", "request"})


def test_plan_json_keeps_no_trace_of_where_a_judge_was_read(tmp_path):
    # The file a definition came from names it in errors but is not part of its data.
    path = _judges_file(tmp_path, "{{ response }}", name="ok")
    [definition] = load_custom_judges(str(path))
    assert json.loads(definition.model_dump_json()) == {
        "name": "ok", "assessment_type": "ANSWER", "instructions": "{{ response }}",
        "examples": []}


def test_a_template_that_slipped_past_the_check_fails_only_its_own_rows(tmp_path):
    # Built without build_custom_judge, as if the static check had missed the attribute walk:
    # the sandbox's SecurityError is that judge's render error for the row, nothing more.
    from judges.builtin.custom import CustomJudge
    from judges.engine import PromptRenderError, _render

    template, marker = _armed(CODE_PAYLOADS[0][0], tmp_path)
    judge = CustomJudge(name="evil", kind="answer", requires=(), template="custom.j2",
                        instructions=template, fields=("request",))
    row = EvalRow(row_index=0, request_id="a", request="q",
                  messages=[Message(role="user", content="q")], response="r")
    with pytest.raises(PromptRenderError, match="judge 'evil' failed to render"):
        _render(judge, row)
    assert not marker.exists()
