"""One row's tool calls against the expected ones: the pairs and the numbers.

Each expected call is paired with at most one actual call of the same name (matching.py says
how: as multisets, or along a longest common subsequence when order is significant), and the
row's numbers are counts of those pairs. Ratios are exact fractions of counts rounded to float
once, so a value equals the float nearest its true ratio and the tests can compare exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, NamedTuple

from judges.toolcalls.arguments import Rule, arguments_mismatch, decode_arguments
from judges.toolcalls.matching import lcs_pairs, multiset_pairs


class ToolCall(NamedTuple):
    """A call: its name and its arguments (expected: None = not checked)."""

    name: str
    arguments: Any = None


def as_call(value: Any) -> ToolCall:
    """A call from plain data: a mapping or an object with `name` and `arguments`.

    Duck typing keeps this module free of any trajectory model: a model's tool step with those
    two attributes is read as it is.

    Raises:
        ValueError: a call without a string name.
    """
    if isinstance(value, Mapping):
        name, arguments = value.get("name"), value.get("arguments")
    else:
        name, arguments = getattr(value, "name", None), getattr(value, "arguments", None)
    if not isinstance(name, str):
        raise ValueError(f"a tool call needs a string name, got {value!r}")
    return ToolCall(name, arguments)


class CallPair(NamedTuple):
    """An expected call paired with an actual call of the same name (0-based indices)."""

    expected_index: int
    actual_index: int
    name: str
    checked: bool  # the expected call gives arguments; False: matched on the name alone
    mismatch: str | None  # why the arguments differ; None when they match or are not checked


class Divergence(NamedTuple):
    """Where the two name sequences first differ, position by position (0-based index).

    `expected` is None past the end of the expected calls (the actual call is extra); `actual`
    is None past the end of the actual calls (the expected call is missing). A sentinel string
    such as "missing" could be a tool's name, so absence is None and `kind` names it.
    """

    index: int
    expected: str | None
    actual: str | None

    @property
    def kind(self) -> Literal["different", "missing", "extra"]:
        """"different" names, an expected call "missing", or an "extra" actual call."""
        if self.expected is None:
            return "extra"
        return "missing" if self.actual is None else "different"


def _ratio(part: int, whole: int) -> float | None:
    return float(Fraction(part, whole)) if whole else None


@dataclass(frozen=True)
class ToolCallVerdict:
    """One row's tool calls against the expected calls.

    Attributes:
        ordered: whether order was significant (LCS matching) or not (multiset matching).
        expected_names, actual_names: the two name sequences.
        pairs: the matched calls, by expected index.
        missing: expected calls left unpaired (indices); extra: actual calls left unpaired.
        matched: len(pairs).
        precision: matched / actual calls; None when no call was made.
        recall: matched / expected calls; None when no call was expected.
        exact_match: every call paired both ways (matched == expected == actual): the same
            names in the same order when ordered, the same multiset of names when not. True
            when no call was expected and none made.
        first_divergence: where the name sequences first differ, in order whatever `ordered`
            says (None when they are equal).
        arguments_checked: pairs whose expected call gives arguments.
        arguments_matched: of those, pairs whose arguments match.
        arguments_match: arguments_matched / arguments_checked; None when nothing was checked.
    """

    ordered: bool
    expected_names: tuple[str, ...]
    actual_names: tuple[str, ...]
    pairs: tuple[CallPair, ...]
    missing: tuple[int, ...]
    extra: tuple[int, ...]

    @property
    def matched(self) -> int:
        """Pairs of an expected and an actual call."""
        return len(self.pairs)

    @property
    def precision(self) -> float | None:
        """Matched / actual calls."""
        return _ratio(self.matched, len(self.actual_names))

    @property
    def recall(self) -> float | None:
        """Matched / expected calls."""
        return _ratio(self.matched, len(self.expected_names))

    @property
    def exact_match(self) -> bool:
        """Every expected call paired and no call extra."""
        return not self.missing and not self.extra

    @property
    def first_divergence(self) -> Divergence | None:
        """The first position where the name sequences differ."""
        e, a = self.expected_names, self.actual_names
        for index in range(max(len(e), len(a))):
            name_e = e[index] if index < len(e) else None
            name_a = a[index] if index < len(a) else None
            if name_e != name_a:
                return Divergence(index, name_e, name_a)
        return None

    @property
    def arguments_checked(self) -> int:
        """Pairs whose expected call gives arguments."""
        return sum(p.checked for p in self.pairs)

    @property
    def arguments_matched(self) -> int:
        """Checked pairs whose arguments match."""
        return sum(p.checked and p.mismatch is None for p in self.pairs)

    @property
    def arguments_match(self) -> float | None:
        """Share of checked pairs whose arguments match."""
        return _ratio(self.arguments_matched, self.arguments_checked)


def tool_call_match(expected: Sequence[Any], actual: Sequence[Any], ordered: bool = True,
                    argument_rules: Mapping[str, Rule] | None = None) -> ToolCallVerdict:
    """Compare a row's actual tool calls with the expected ones.

    Args:
        expected: calls as {name, arguments}; arguments None or absent: matched on name alone.
        actual: calls as {name, arguments}; arguments an object, a JSON string or None (none).
        ordered: whether order is significant (LCS matching) or not (multiset matching).
        argument_rules: a rule per argument name, for every tool; `exact` for the others.

    Edge cases, decided:
        - nothing expected and nothing made: precision and recall None (0/0), exact match.
        - nothing expected but calls made: precision 0 (none was expected), recall None.
        - calls expected, none made: precision None, recall 0.
        - duplicates: a call is in at most one pair, so a repeated call counts once per
          expected occurrence and the repeats beyond are extra.
        - actual arguments None are the empty object; a string is decoded as JSON, and one that
          is not an object stays raw, equal only to the identical (expected) string.

    Raises:
        ValueError: a call without a name, or a regex rule with an invalid pattern.
        TypeError: arguments that are neither an object, a string nor None.
    """
    exp, act = [as_call(c) for c in expected], [as_call(c) for c in actual]
    exp_args = [None if c.arguments is None else decode_arguments(c.arguments) for c in exp]
    act_args = [decode_arguments(c.arguments) for c in act]
    names_e, names_a = tuple(c.name for c in exp), tuple(c.name for c in act)
    mismatches: dict[tuple[int, int], str | None] = {}

    def mismatch(i: int, j: int) -> str | None:
        if (i, j) not in mismatches:
            mismatches[i, j] = (None if exp_args[i] is None else
                                arguments_mismatch(exp_args[i], act_args[j], argument_rules))
        return mismatches[i, j]

    pair_up = lcs_pairs if ordered else multiset_pairs
    index_pairs = pair_up(names_e, names_a, lambda i, j: mismatch(i, j) is None)
    pairs = tuple(CallPair(i, j, names_e[i], exp_args[i] is not None, mismatch(i, j))
                  for i, j in index_pairs)
    paired_e, paired_a = {p.expected_index for p in pairs}, {p.actual_index for p in pairs}
    return ToolCallVerdict(
        ordered, names_e, names_a, pairs,
        missing=tuple(i for i in range(len(exp)) if i not in paired_e),
        extra=tuple(j for j in range(len(act)) if j not in paired_a))
