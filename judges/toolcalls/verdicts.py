"""The deterministic tool-call judges: a yes/no verdict per row, like every judgeflow judge.

Each reads a row's `ToolCallVerdict` and gives a `Verdict` whose rationale names what failed
first (the divergence, the call that is missing, the argument that differs), 1-based as a
person counts calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from judges.results import Verdict
from judges.toolcalls.metrics import ToolCallVerdict


def _names(names: Sequence[str]) -> str:
    counts = Counter(names)
    return ", ".join(f"{name!r}" + (f" ×{n}" if n > 1 else "") for name, n in counts.items())


def _calls(count: int) -> str:
    return "no call" if count == 0 else "1 call" if count == 1 else f"{count} calls"


def _sequence_rationale(match: ToolCallVerdict) -> str:
    if not match.ordered:
        missing = _names([match.expected_names[i] for i in match.missing]) or "none"
        extra = _names([match.actual_names[j] for j in match.extra]) or "none"
        return f"The calls differ from the expected ones: missing {missing}; extra {extra}."
    d = match.first_divergence
    assert d is not None  # an inexact ordered match has a divergence
    if d.kind == "missing":
        return (f"The agent stopped after {_calls(d.index)}: expected call {d.index + 1}, "
                f"{d.expected!r}, was not made.")
    if d.kind == "extra":
        return (f"Call {d.index + 1}, {d.actual!r}, is extra: the expected sequence has "
                f"{_calls(d.index)}.")
    return f"Call {d.index + 1} is {d.actual!r} where {d.expected!r} was expected."


def tool_sequence_match(match: ToolCallVerdict) -> Verdict:
    """The tool_sequence_match judge: "yes" iff `exact_match`, naming the first divergence."""
    if match.exact_match:
        count = len(match.expected_names)
        how = "in the expected order" if match.ordered else "order not significant"
        text = (f"The {count} calls are the expected ones, {how}." if count
                else "No call was expected and none was made.")
        return Verdict(rating="yes", rationale=text)
    return Verdict(rating="no", rationale=_sequence_rationale(match))


def tool_arguments_match(match: ToolCallVerdict) -> Verdict:
    """The tool_arguments_match judge: every expected call made, with its arguments.

    "yes" iff every expected call is paired and each pair whose expected call gives arguments
    matches them; the rationale names the earliest expected call that fails. Extra calls are
    not its concern (precision and tool_sequence_match count them), so a row expecting no call
    is a vacuous "yes".
    """
    in_order = " in order" if match.ordered else ""
    failures = [(i, f"Expected call {i + 1}, {match.expected_names[i]!r}, has no matching "
                    f"call{in_order}.") for i in match.missing]
    failures += [(p.expected_index, f"Call {p.actual_index + 1}, {p.name!r} (expected call "
                  f"{p.expected_index + 1}): {p.mismatch}.") for p in match.pairs if p.mismatch]
    if failures:
        return Verdict(rating="no", rationale=min(failures)[1])
    if not match.expected_names:
        return Verdict(rating="yes", rationale="No call was expected.")
    text = "Every expected call was made with the expected arguments."
    unchecked = len(match.expected_names) - match.arguments_checked
    if unchecked:
        text = text[:-1] + f" ({unchecked} of them without arguments to check, matched by name)."
    return Verdict(rating="yes", rationale=text)
