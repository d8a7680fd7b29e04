"""What a custom judge's instructions may be: a jinja2 template that is data, not code.

Whoever can trigger a deployment run may set `custom_judges`, so the instructions are as
untrusted as the rows. They are checked when loaded (`referenced_fields`: only `{{ field }}`,
`{% if %}` and string literals, nothing that reaches an attribute, a call, a loader or an
operator) and rendered in jinja2's sandbox without globals, filters or loader
(`template_sandbox`), so that a check that missed something still meets a SecurityError, not the
worker's Python.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.defaults import DEFAULT_NAMESPACE
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from judges.errors import ConfigError

# The row's own fields a template may name (besides the set's extra columns).
ROW_FIELDS = (
    "request", "response", "expected_response", "expected_facts",
    "retrieved_context", "expected_retrieved_context", "trajectory", "conversation",
)


class CustomJudgeError(ConfigError):
    """A custom judge definition that cannot run (bad file, unknown field, bad template)."""


# What a template that is data may contain. Tests take no arguments; there are no filters, as
# every value is already an <untrusted-...> block and a filter would rewrite its tags too.
ALLOWED_TESTS = frozenset({"defined", "undefined", "none"})
ALLOWED_FILTERS: frozenset[str] = frozenset()
_ALLOWED_NODES = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.If, nodes.Not,
                  nodes.And, nodes.Or, nodes.Concat)
# Names jinja2 resolves itself (`self` is always the template; the rest are its default globals
# or exist only in loops and macros): never a field, even when a column has that name.
RESERVED_NAMES = frozenset(DEFAULT_NAMESPACE) | {"self", "loop", "caller", "varargs", "kwargs",
                                                 "super"}
_REFUSED_WORDS = {
    "Getattr": "attribute access (x.y)", "Getitem": "item access (x[...])",
    "Call": "a function or method call",
    "Include": "{% include %}", "Import": "{% import %}", "FromImport": "{% from ... import %}",
    "Extends": "{% extends %}", "Macro": "{% macro %}", "CallBlock": "{% call %}",
    "For": "a {% for %} loop", "Assign": "{% set %}", "AssignBlock": "{% set %}",
    "With": "{% with %}", "Block": "{% block %}", "FilterBlock": "{% filter %}",
}
HOW_TO_FIX = (
    "use only {{ field }} and {% if field %}...{% endif %} (tests: "
    + ", ".join(f"is {t}" for t in sorted(ALLOWED_TESTS))
    + "; filters: " + (", ".join(sorted(ALLOWED_FILTERS)) or "none")
    + f") with the fields {', '.join(ROW_FIELDS)} or an extra column of the set"
)


class _DataSandbox(ImmutableSandboxedEnvironment):
    """jinja2's sandbox with every operator refused, so no template can build a huge value.

    Intercepted operators also keep the compiler from folding `'a' * 10**9` at compile time.
    """

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"+", "-"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """Refuse the operator: templates that are data do no arithmetic."""
        raise SecurityError(f"the operator {operator!r} is not allowed in custom judge templates")

    def call_unop(self, context: Context, operator: str, arg: Any) -> Any:
        """Refuse the operator: templates that are data do no arithmetic."""
        raise SecurityError(f"the operator {operator!r} is not allowed in custom judge templates")


@cache
def template_sandbox() -> ImmutableSandboxedEnvironment:
    """The environment of templates that do not ship with judgeflow (custom instructions).

    Sandboxed and immutable, no loader (so no include, import or extends), no globals (no
    cycler, joiner, namespace, lipsum, range, dict), only the allowed filters and tests, strict
    about undefined names and without HTML escaping (prompts are text).
    """
    env = _DataSandbox(loader=None, undefined=jinja2.StrictUndefined, autoescape=False)
    env.globals.clear()
    env.filters = {name: env.filters[name] for name in ALLOWED_FILTERS}
    env.tests = {name: env.tests[name] for name in ALLOWED_TESTS}
    return env


@lru_cache(maxsize=256)
def compiled(instructions: str) -> jinja2.Template:
    """The instructions compiled once in the sandbox, not once per row."""
    return template_sandbox().from_string(instructions)


class _Refused(Exception):
    """A construct a template that is data may not contain: what it is and its line."""

    def __init__(self, what: str, node: nodes.Node) -> None:
        super().__init__(f"{what} (line {node.lineno})")


def _data_only(node: nodes.Node, names: set[str]) -> None:
    """Walk the parsed template, collecting its names; _Refused at the first other construct."""
    kind = type(node)  # exact types: And and Or are BinExpr, as Mul and Pow are
    if kind is nodes.Name:
        if node.ctx != "load" or node.name in RESERVED_NAMES:
            raise _Refused(f"the name {node.name!r}", node)
        names.add(node.name)
    elif kind is nodes.Const:
        if not (node.value is None or type(node.value) in (str, int, bool)):
            raise _Refused(f"the literal {node.value!r}", node)
    elif kind in (nodes.Test, nodes.Filter):
        word = "test" if kind is nodes.Test else "filter"
        if node.name not in (ALLOWED_TESTS if kind is nodes.Test else ALLOWED_FILTERS):
            raise _Refused(f"the {word} {node.name!r}", node)
        if node.args or node.kwargs or node.dyn_args or node.dyn_kwargs:
            raise _Refused(f"arguments to the {word} {node.name!r}", node)
    elif kind not in _ALLOWED_NODES:
        operator = getattr(node, "operator", None)
        what = f"the operator {operator!r}" if operator else _REFUSED_WORDS.get(
            kind.__name__, f"the construct {kind.__name__}")
        raise _Refused(what, node)
    for child in node.iter_child_nodes():
        _data_only(child, names)


def referenced_fields(instructions: str, where: str = "custom judge") -> set[str]:
    """The fields the instructions name, once they are known to be data only.

    Args:
        instructions: the jinja2 template.
        where: the judge and its file, for the error message.

    Raises:
        CustomJudgeError: a template that does not parse, or that contains anything but
            fields, literals and `{% if %}` (one sentence: what, where, how to fix).
    """
    names: set[str] = set()
    try:
        _data_only(template_sandbox().parse(instructions), names)
        compiled(instructions)
    except _Refused as refused:
        raise CustomJudgeError(
            f"{where}: instructions are not a valid template: {refused} is not allowed in a "
            f"template that is data; {HOW_TO_FIX}") from None
    # ValueError and RecursionError: the lexer's int() of a huge literal, deep nesting.
    except (jinja2.TemplateError, ValueError, RecursionError) as error:
        first = (str(error).splitlines() or [type(error).__name__])[0][:200]
        raise CustomJudgeError(
            f"{where}: instructions are not a valid template: {first}; {HOW_TO_FIX}") from None
    return names
