"""Whether a call's arguments are the expected ones: JSON equality, or a rule per argument.

Arguments are a JSON object. Equality is JSON's, not Python's: key order never matters, 1 and
1.0 are equal (both are JSON numbers), but `true` is not 1 and "1" is not 1, which Python's
`==` would blur (True == 1). A string of arguments (what OpenAI-style `tool_calls` carry) is
decoded first; one that does not decode to an object stays a raw string, equal only to the
identical string, since a broken call must not match by accident.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal, get_args

RuleKind = Literal["exact", "ignore", "case_insensitive", "numeric_tolerance", "contains",
                   "regex"]
RULE_KINDS: frozenset[str] = frozenset(get_args(RuleKind))
Arguments = Mapping[str, Any] | str  # decoded: an object, or a raw string that is not one
SHOWN_CHARS = 60  # of a value quoted in a mismatch


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: objects by key set and values, arrays in order, 1 == 1.0, true != 1."""
    if _is_number(a) and _is_number(b):
        return a == b  # int against float is exact in Python: 2**53 + 1 != 2.0**53
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    # Strings, bools and null equal only their own kind; a number never equals a bool.
    return type(a) is type(b) and a == b


@lru_cache(maxsize=256)
def _pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as err:
        raise ValueError(f"argument rule regex: invalid pattern {pattern!r}: {err}") from err


@dataclass(frozen=True)
class Rule:
    """How one argument's actual value is compared with the expected value.

    Rules are keyed by top-level argument name and apply to that argument of every tool; a
    nested value is compared whole, by the argument's rule.

    Kinds:
        exact: JSON equality (the rule of an argument that has none).
        ignore: not compared; the argument may be missing on either side.
        case_insensitive: two strings equal after casefold(); other values compared exactly.
        numeric_tolerance: two numbers within `tolerance` (|actual - expected| <= tolerance),
            compared as the decimals written, not as binary floats (1.3 is within 0.1 of
            1.2); anything else, a numeric string or a bool included, does not match.
        contains: the actual string contains the expected string (case-sensitive).
        regex: the expected value is a pattern the whole actual string matches (re.fullmatch,
            so "a" does not accept "cat"; write ".*a.*" for a search).
    """

    kind: RuleKind = "exact"
    tolerance: float | Decimal = 0.0

    def __post_init__(self) -> None:
        if self.kind not in RULE_KINDS:
            raise ValueError(f"unknown argument rule {self.kind!r}; one of {sorted(RULE_KINDS)}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"tolerance must be finite and >= 0, got {self.tolerance!r}")

    def accepts(self, expected: Any, actual: Any) -> bool:
        """Whether `actual` satisfies the expected value under this rule.

        Raises:
            ValueError: a regex rule whose expected value is not a valid pattern (a data error,
                never a "no").
        """
        if self.kind == "ignore":
            return True
        both_strings = isinstance(expected, str) and isinstance(actual, str)
        if self.kind == "case_insensitive" and both_strings:
            return expected.casefold() == actual.casefold()
        if self.kind == "numeric_tolerance":
            return (_is_number(expected) and _is_number(actual)
                    and _within(_written(expected), _written(actual), _written(self.tolerance)))
        if self.kind == "contains":
            return both_strings and expected in actual
        if self.kind == "regex":
            if not isinstance(expected, str):
                raise ValueError(f"argument rule regex: the pattern must be a string, "
                                 f"got {expected!r}")
            return isinstance(actual, str) and _pattern(expected).fullmatch(actual) is not None
        return json_equal(expected, actual)

    def __str__(self) -> str:
        return (f"numeric_tolerance({self.tolerance:g})" if self.kind == "numeric_tolerance"
                else self.kind)


def _written(number: float | Decimal) -> Decimal:
    """A number as the decimal it was written as.

    A JSON number decodes to the nearest binary float (1.3 to 1.29999999999999993…); its
    shortest repr, `str`, is the decimal it was written as (for up to 15 significant digits),
    so a tolerance compares what the user wrote, not the floats' rounding.
    """
    return number if isinstance(number, Decimal) else Decimal(str(number))


def _within(expected: Decimal, actual: Decimal, tolerance: Decimal) -> bool:
    if not (expected.is_finite() and actual.is_finite()):
        return False  # inf or nan is within no tolerance of anything (nan would also raise)
    return abs(actual - expected) <= tolerance


EXACT, IGNORE, CASE_INSENSITIVE = Rule("exact"), Rule("ignore"), Rule("case_insensitive")
CONTAINS, REGEX = Rule("contains"), Rule("regex")


def numeric_tolerance(tolerance: float | str | Decimal) -> Rule:
    """The rule accepting a number within `tolerance` of the expected one.

    A string is read as the decimal it spells (`numeric_tolerance:0.1` in expected_tool_calls).
    """
    return Rule("numeric_tolerance", Decimal(tolerance) if isinstance(tolerance, str)
                else tolerance)


def decode_arguments(value: Any) -> Arguments:
    """A call's arguments as an object, or as the raw string when they are not one.

    None (a call made without arguments) is the empty object. A string is decoded as JSON; if it
    is not a JSON object (broken, truncated, or an array or a scalar) it is kept as it is.

    Raises:
        TypeError: arguments that are neither an object, a string nor None.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, dict) else value
    raise TypeError(f"tool call arguments must be an object, a JSON string or None, "
                    f"got {value!r}")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def arguments_mismatch(expected: Arguments, actual: Arguments,
                       rules: Mapping[str, Rule] | None = None) -> str | None:
    """Why the actual arguments differ from the expected ones; None when they match.

    Every argument on either side is compared by its rule (`exact` when it has none), so with
    no rules this is JSON equality of the two objects: an argument missing on one side is a
    mismatch unless its rule is `ignore`. Raw strings (arguments that are not an object) match
    only the identical string. The first difference is named, expected arguments first.
    """
    if isinstance(expected, str) or isinstance(actual, str):
        if expected == actual:
            return None
        return f"arguments: expected {_shown(expected)}, got {_shown(actual)}"
    rules = rules or {}
    for key in [*expected, *(k for k in actual if k not in expected)]:
        rule = rules.get(key, EXACT)
        if rule.kind == "ignore":
            continue
        if key not in actual:
            return f"argument {key!r} is missing (expected {_shown(expected[key])})"
        if key not in expected:
            return f"argument {key!r} was not expected (got {_shown(actual[key])})"
        if not rule.accepts(expected[key], actual[key]):
            how = "" if rule.kind == "exact" else f" under rule {rule}"
            return (f"argument {key!r}: expected {_shown(expected[key])}, "
                    f"got {_shown(actual[key])}{how}")
    return None
