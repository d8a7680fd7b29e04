"""Neutralising anything in evaluated text that a model could read as an <untrusted-…> tag.

A model is no parser: it reads `<­/untrustеd-response>` (a soft hyphen after the bracket, a
Cyrillic `е`) as the closing tag it resembles. So a bracket is neutralised (written `&lt;`)
when what follows it reads as `untrusted` once folded the way a reader sees it: Unicode NFKC
(full-width and mathematical letters become plain ones), look-alike letters from other scripts
mapped to the Latin ones, case ignored, and invisible characters (format characters such as
zero-width spaces, soft hyphens and U+2062, combining marks, controls, variation selectors)
skipped, as are spaces and slashes between the bracket and the word.

Why not a random token in the tag name instead: the judge-call cache key holds the rendered
messages (judges/cache.py), so a per-call token would turn every rerun into new calls; a token
derived from the content would keep the cache but still leave a look-alike of the plain tag
for the model to misread. Folding keeps the prompt deterministic and removes the look-alike.

Cost: one regex scan for brackets a tag may follow; after each, a walk that stops at the first
character that cannot continue the word, so every character is walked at most once past one
bracket and the whole text is linear in its length (16 MiB of HTML: 0.2 s).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

WORD = "untrusted"
NEUTRAL_BRACKET = "&lt;"
# Brackets a model reads as "<": NFKC maps the full-width and small forms to it; the others
# are look-alikes NFKC leaves alone (angle quotes and brackets, arrowheads, syllabics).
_BRACKETS = re.compile(
    "[<\uFF1C\uFE64\u2039\u3008\u27E8\u2329\u276C\u276E\u27EA\u29FC\u02C2\u1438\u2D66"
    "\u227A\uFE3F\u300A\u00AB]"
    # Only where a tag may follow: ASCII spaces, slashes, backslashes (`<\/` is a slash
    # escaped in JSON) and controls, then a "u" or anything not ASCII but accented Latin,
    # CJK ideographs and Hangul syllables (none reads as a "u", an invisible or a slash).
    # Markup such as `<div>` or `</p>`, and prose in most scripts, pass at the regex's speed.
    "(?=[\\s/\\\\\x00-\x1f\x7f]*(?:[uU]|[^\x00-\x7f\u00c0-\u024f\u4e00-\u9fff\uac00-\ud7a3]))"
)
# Letters NFKC leaves alone that look like one of WORD's (Cyrillic, Greek, Armenian, small
# capitals, modifier letters), and slashes that look like "/".
_LOOKALIKES = str.maketrans({
    "\u0430": "a", "\u0435": "e", "\u0451": "e", "\u0454": "e",
    "\u0441": "c", "\u0455": "s", "\u0501": "d", "\u0503": "d", "\u0442": "t", "\u0433": "r",
    "\u03C5": "u", "\u028B": "u", "\u057D": "u", "\u1D1C": "u", "\u0446": "u", "\u0574": "u",
    "\u0578": "n", "\u057C": "n", "\u03B7": "n", "\u0438": "n", "\u043F": "n", "\u0274": "n",
    "\u03C4": "t", "\u1D1B": "t", "\u0163": "t", "\u01AB": "t",
    "\u0280": "r", "\u1D26": "r", "\u027E": "r",
    "\u01BD": "s", "\uA731": "s", "\u0282": "s",
    "\u03B5": "e", "\u0259": "e", "\u04BD": "e", "\u1D07": "e", "\u212E": "e",
    "\u0257": "d", "\u0256": "d", "\u1D05": "d", "\u217E": "d",
    "\u2215": "/", "\u2044": "/", "\u29F8": "/", "\u2571": "/",
})
# Default-ignorable characters outside the categories skipped below (Hangul fillers, the
# Mongolian vowel separator, and the ideographic half fill space).
_IGNORABLE = frozenset("\u115F\u1160\u3164\uFFA0\u180E\u3000\u2800")
_SKIPPED_CATEGORIES = frozenset({"Cf", "Cc", "Mn", "Me", "Zs", "Zl", "Zp"})


@lru_cache(maxsize=4096)
def _folded(char: str) -> str:
    """What a reader sees of one character: "" when invisible, else its folded letters."""
    if char in _IGNORABLE or unicodedata.category(char) in _SKIPPED_CATEGORIES:
        return ""
    return unicodedata.normalize("NFKC", char).translate(_LOOKALIKES).casefold()


def _reads_as_tag(text: str, start: int) -> bool:
    """Whether text[start:] reads as (spaces or slashes, then) WORD, invisibles skipped."""
    matched = 0
    for index in range(start, len(text)):
        folded = _folded(text[index])
        if not folded:  # invisible, or a space
            continue
        if matched == 0 and set(folded) <= {"/", "\\", " "}:  # "<\/": a JSON-escaped slash
            continue
        if not WORD.startswith(folded, matched):
            return False
        matched += len(folded)
        if matched == len(WORD):
            return True
    return False


def neutralised(text: str) -> str:
    """`text` with every bracket that opens a look-alike of an <untrusted…> tag made `&lt;`."""
    out: list[str] = []
    kept = 0
    for match in _BRACKETS.finditer(text):
        if _reads_as_tag(text, match.end()):
            out.append(text[kept:match.start()])
            out.append(NEUTRAL_BRACKET)
            kept = match.end()
    if not out:
        return text
    out.append(text[kept:])
    return "".join(out)
