"""Text from outside, made safe to print: in a log line, a state message, a terminal, XML.

Model strings, suite names, run ids, gate names, reasons and error messages (which may quote a
judge's or a candidate's reply) are chosen by whoever triggers a run, or written by a model.
Printed as they are, a newline or a carriage return forges a line that looks like one of ours,
an ANSI escape recolours or erases the terminal, a bidi override makes the text read in another
order than it is stored, and a zero-width character hides a difference. `visible` shows each such
character as the escape `repr` would use, and leaves every other character as written.

This is the one place that does it: the Markdown of tasks/report/markdown_text.py builds on it, and
the flows and tasks apply it to what they log and to their state messages. It lives in
judges/blocks beside the prompt's delimiters, the other half of keeping outside text inert, at
the bottom where every package that prints outside values can reach it (the judges layer itself
quotes replies with `repr`, which escapes the same characters, inside quotes).
"""

from __future__ import annotations


def _escape(char: str) -> str:
    # '\n', '\r', '\t', '\x1b', '\u202e', '\U000e0001': the escapes repr would show.
    return char.encode("unicode_escape").decode("ascii")


def visible(value: object) -> str:
    """`value` as text with no character that prints invisibly or controls the display.

    Every character Python does not count as printable (controls such as newline, carriage
    return and ESC, format characters such as bidi overrides and zero-width spaces, line and
    paragraph separators, unassigned and lone surrogate code points) becomes its visible escape.
    Backslashes are kept as they are, so paths and patterns read as written; the escapes only
    have to be seen, not decoded. The result is printable ASCII wherever it changed anything,
    so `visible(visible(x)) == visible(x)` and applying it twice on the way is harmless.

    Args:
        value: any object; its str() is shown.

    Returns:
        One line of printable text.
    """
    text = str(value)
    if text.isprintable():  # nearly always: ordinary text goes through untouched
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def visible_lines(value: object) -> str:
    """`value` with its newline characters kept, every other character as in `visible`.

    For messages that are several lines by design (a YAML parser's diagnostic, the list of a
    set's invalid rows), where each line's own content is outside text or quotes it: a carriage
    return, ANSI escape or bidi override in a line still shows as its escape.
    """
    return "\n".join(visible(line) for line in str(value).split("\n"))
