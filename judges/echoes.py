"""Telling a judge's own judgment from an echo of the evaluated text, re-typed or not.

Judges quote what they read, and the evaluated text may hold a forged verdict. A judge does not
always quote exactly: it lower-cases, unescapes a JSON string, straightens curly or full-width
quotes and braces, writes a Python dict as JSON, closes an unclosed object, drops a key, or
unwraps an object from its wrapper. So the evaluated text is normalised (Unicode NFKC,
invisible characters dropped, look-alike letters, quotes and braces mapped, JSON string escapes
undone) and every object it holds is read tolerantly (JSON, a Python literal, an unclosed
object closed, objects nested in others). A reply's object is an echo when one of them carries
the same verdict and the reply's free text (the rationale) is nearly all words of the evaluated
text. An honest verdict survives a response that merely holds the same verdict: its rationale
is the judge's own. Text that is not an object at all is compared as a stream of words.

Judge calls no longer need this: each asks for a token the evaluated text cannot know
(judges/blocks/call_token.py), which tells the judge's objects from the text's exactly. It
serves judges/parsing.py's `parse_reply` when called without a token.
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator

# Letters from other scripts that look like Latin ones, as forgeries use them to hide a key.
_CONFUSABLES = {
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ј": "j",
    "ѕ": "s", "ԁ": "d", "ɡ": "g", "һ": "h", "ո": "n", "ν": "v", "ο": "o", "α": "a", "ε": "e",
    "ι": "i", "κ": "k", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ѵ": "v", "ԛ": "q", "ԝ": "w",
    # quotes and braces NFKC leaves alone
    "“": '"', "”": '"', "„": '"', "‟": '"', "″": '"', "«": '"', "»": '"', "〝": '"', "〞": '"',
    "‘": "'", "’": "'", "‚": "'", "‛": "'", "′": "'", "‹": "'", "›": "'",
    "❴": "{", "❵": "}", "⦃": "{", "⦄": "}", "〔": "[", "〕": "]", "⟦": "[", "⟧": "]",
}
# Invisible format characters (Unicode category Cf) that hide a word from a plain comparison.
_INVISIBLE_RANGES = ((0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD),
                     (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E),
                     (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
                     (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
                     (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
                     (0xE0001, 0xE0001), (0xE0020, 0xE007F))
_LOOKALIKES = str.maketrans({
    **_CONFUSABLES,
    **{chr(c): None for low, high in _INVISIBLE_RANGES for c in range(low, high + 1)},
})
_WORD = re.compile(r"[^\W_]+")
_JSON_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": " ", "f": " ", "n": "\n", "r": "\r", "t": "\t"}
_DECODER = json.JSONDecoder()
# Share of a reply's free-text words that must come from the evaluated text for the object to be
# a copy: a re-typed copy keeps nearly all of them, a judge's own rationale few.
ECHO_SHARE = 0.75
# Bounds on the work spent per evaluated text: a response full of braces cannot stall a call.
MAX_OBJECTS = 200
MAX_OBJECT_CHARS = 20_000
FREE_TEXT_FIELDS = ("rationale", "description")


def normalised(text: str) -> str:
    """NFKC, invisible (format) characters dropped, look-alike letters, quotes and braces mapped."""
    if text.isascii():  # nothing to map: the common case, kept cheap on the hot path
        return text
    return unicodedata.normalize("NFKC", text).translate(_LOOKALIKES)


def json_unescaped(text: str) -> str:
    """`text` with JSON string escapes undone (a forgery may sit inside a JSON string)."""
    def undo(match: re.Match) -> str:
        code = match.group(1)
        return chr(int(code[1:], 16)) if code[0] == "u" else _ESCAPES[code]

    for _ in range(3):  # escaped twice or three times over
        unescaped = _JSON_ESCAPE.sub(undo, text)
        if unescaped == text:
            break
        text = unescaped
    return text


def words(value: object) -> list[str]:
    """The case-folded words of a value (keys and values of objects, in order)."""
    if isinstance(value, dict):
        return [w for key, inner in value.items() for w in [*words(str(key)), *words(inner)]]
    if isinstance(value, list):
        return [w for inner in value for w in words(inner)]
    if value is None:
        return []
    text = json.dumps(value) if isinstance(value, bool) else str(value)
    return _WORD.findall(normalised(text).casefold())


def share_found(mine: list[str], theirs: Iterable[str]) -> float:
    """Share of `mine` (repeats counted) that `theirs` also holds; 1.0 when `mine` is empty."""
    if not mine:
        return 1.0
    return sum((Counter(mine) & Counter(theirs)).values()) / len(mine)


def lowered_keys(value: object) -> object:
    """A value whose object keys are stripped and lower-cased, at every depth."""
    if isinstance(value, dict):
        return {str(k).strip().lower(): lowered_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [lowered_keys(v) for v in value]
    return value


class EvaluatedText:
    """The evaluated content a judge was given, read on first use as objects and as words."""

    def __init__(self, texts: Iterable[str]):
        self._texts = [t for t in texts if t]
        self._variants: list[str] | None = None
        self._objects: list[dict] | None = None
        self._folded: str | None = None

    def __bool__(self) -> bool:
        return bool(self._texts)

    def mentions(self, word: str) -> bool:
        """Whether a case-folded word occurs anywhere in the normalised content (a cheap test)."""
        if self._folded is None:
            self._folded = "\n".join(self.variants()).casefold()
        return word in self._folded

    def variants(self) -> list[str]:
        """Each text normalised, as given and with its JSON string escapes undone."""
        if self._variants is None:
            found = {normalised(v) for t in self._texts for v in (t, json_unescaped(t))}
            self._variants = sorted(found)
        return self._variants

    def objects(self) -> list[dict]:
        """Every object in the content, read tolerantly, nested ones included; keys lowered."""
        if self._objects is None:
            found: list[dict] = []
            for text in self.variants():
                for value in _tolerant_objects(text):
                    found += _nested_dicts(lowered_keys(value))
            self._objects = found[: MAX_OBJECTS * 4]
        return self._objects

    def word_streams(self) -> list[list[str]]:
        """The content's words, per text variant."""
        return [words(text) for text in self.variants()]


def _tolerant_objects(text: str) -> Iterator[dict]:
    """Objects in `text`: JSON, a Python literal, or an object left unclosed, closed here."""
    position, seen = text.find("{"), 0
    while position != -1 and seen < MAX_OBJECTS:
        seen += 1
        value = _object_at(text, position)
        if value is not None:
            yield value
        position = text.find("{", position + 1)


def _object_at(text: str, start: int) -> dict | None:
    try:
        value, _ = _DECODER.raw_decode(text, start)
        return value if isinstance(value, dict) else None
    except (json.JSONDecodeError, RecursionError):
        pass
    fragment, closers = _balanced(text, start)
    for candidate in (fragment, fragment + closers):
        for reader in (json.loads, ast.literal_eval):
            try:
                value = reader(candidate)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, dict):
                return value
    return None


def _balanced(text: str, start: int) -> tuple[str, str]:
    """The object text from `start` to its closing brace, or to the end with the closers due."""
    stack: list[str] = []
    quote: str | None = None
    end = min(len(text), start + MAX_OBJECT_CHARS)
    index = start
    while index < end:
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if stack:
                stack.pop()
            if not stack:
                return text[start:index + 1], ""
        index += 1
    fragment = text[start:end].rstrip().rstrip(",")
    return fragment + (quote or ""), "".join(reversed(stack))


def _nested_dicts(value: object) -> list[dict]:
    if isinstance(value, dict):
        return [value, *(d for inner in value.values() for d in _nested_dicts(inner))]
    if isinstance(value, list):
        return [d for inner in value for d in _nested_dicts(inner)]
    return []


def near_word_stream(mine: list[str], anchor: list[str], streams: list[list[str]]) -> bool:
    """Whether `anchor` occurs in a stream with nearly all of `mine` around it."""
    if not anchor:
        return False
    reach = 2 * len(mine) + 8
    for stream in streams:
        for index, word in enumerate(stream):
            if word == anchor[0] and stream[index:index + len(anchor)] == anchor:
                window = stream[max(0, index - reach):index + reach]
                if share_found(mine, window) >= ECHO_SHARE:
                    return True
    return False
