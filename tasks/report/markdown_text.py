"""Text from outside, as Markdown that shows the text and nothing else.

summary.md (often a pull-request comment) and the Prefect artifacts show model strings, suite
names, run ids, gate names, reasons and error messages, which whoever triggers a run chooses or a
model writes. Interpolated as they are, a backtick closes a code span so that
`![t](http://evil.example/i.png)` renders a live image, a pipe splits a table row, a newline
starts a heading. Every value goes through one of these functions, which render it as text, on
one line, whatever it holds, and leave an ordinary value (openai/gpt-4o-mini,
response/llm_judged/correctness/rating/percentage) looking as it is.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from judges.blocks.plain_text import visible

# Any ASCII punctuation character may be backslash-escaped (CommonMark, section 2.4); these are
# the ones that can start markup: emphasis, code, links and images, headings, lists, tables,
# raw HTML, entities (&) and GFM strikethrough (~). GitHub also turns 'http:', 'www.' and
# 'a@b.c' into links and '$…$' into math: ':', '.', '@' and '$' are escaped for that.
_MARKUP = re.compile(r"[\\`*_{}\[\]()#+\-.!|<>~&:@$]")
# Where a line ends for str.splitlines: Markdown itself breaks at \n and \r; the rest are folded
# too, so that no renderer can see a line break in a value.
_LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")
_BACKTICKS = re.compile("`+")
# What a link destination keeps as it is: the reserved and unreserved characters of a URL and
# '%' (already encoded). Space, controls, '<', '>', '(', ')', '\', '`' and '"' are
# percent-encoded, so nothing in the URL can end the destination or the link.
_URL_SAFE = "/:?#[]@!$&'*+,;=%~"


def _one_line(value: object) -> str:
    return visible(_LINE_BREAKS.sub(" ", str(value)))


def inline(value: object) -> str:
    """`value` as Markdown text: every character that could start markup backslash-escaped.

    Line breaks become spaces; other control, bidi and invisible characters their visible
    escape (judges/blocks/plain_text.py), whose backslash is then escaped like any other.

    Args:
        value: any object; its str() is shown.

    Returns:
        Markdown that renders as the value's text, in one paragraph, with no markup.
    """
    return _MARKUP.sub(r"\\\g<0>", _one_line(value))


def cell(value: object) -> str:
    """`value` as the text of a Markdown table cell, which no pipe in it can split.

    The same text as `inline`: it doubles every backslash and escapes every pipe, so each pipe
    follows an odd number of backslashes, which GFM (cmark-gfm), markdown-it and marked all read
    as a pipe in the text rather than a column break. Code spans are never used in a cell: in a
    table a pipe inside one still splits the row, and its backslashes cannot be doubled.

    Args:
        value: any object; its str() is shown.
    """
    return inline(value)


def code(value: object) -> str:
    """`value` as a code span, shown exactly as it is (outside a table only, see `cell`).

    Inside a code span nothing is markup and no backslash escape works (CommonMark, section
    6.1), so nothing is escaped: the span is opened and closed by a run of backticks longer
    than any run in the value, which therefore cannot close it, and padded with a space when
    the value starts or ends with a backtick or a space (the renderer strips that one space).

    Args:
        value: any object; its str() is shown, on one line, controls as visible escapes.
    """
    text = _one_line(value)
    fence = "`" * (1 + max(map(len, _BACKTICKS.findall(text)), default=0))
    pad = " " if text[:1] in ("", "`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def link(label: object, url: str) -> str:
    """A Markdown link to an http(s) URL; any other URL is shown as `code`, never linked.

    Args:
        label: the link's text (escaped with `inline`).
        url: where it points; characters that could end the destination are percent-encoded.
    """
    if not url.lower().startswith(("https://", "http://")):
        return code(url)
    return f"[{inline(label)}]({quote(url, safe=_URL_SAFE)})"
