"""No six-line repeat in product code that is not declared boilerplate (issue 47 item 6).

A repeat is six consecutive code lines that stand again elsewhere, either to the letter or in the
same shape with other names, strings and numbers (the copy that was edited after pasting) where at
least half the lines do something (a call with arguments, a test, a loop, a return, an operator):
a run of fields or keyword arguments that merely reads alike is a declaration, not shared logic.
Blank lines, comments, docstrings, imports and lines of lone punctuation do not count. What is
repeated on purpose is declared below, with the reason, by the files it may stand in; anything
else fails CI, so a repeat is turned into one shared piece when it is written.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from fnmatch import fnmatch
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("flows", "tasks", "judges", "prompts")
WINDOW = 6

# A repeat is allowed only where both places match the globs of one entry: (glob, glob, reason).
BOILERPLATE: tuple[tuple[str, str, str], ...] = (
    ("flows/compare.py", "flows/rejudge.py",
     "flow bodies read as tables of contents, phase by phase (warn, place the run, prepare, "
     "judge in batch mode); each calls its own phases, which issue 47 items 1-2 make one"),
)


class Line(NamedTuple):
    number: int
    exact: str  # the tokens, white space folded
    shape: str  # the same with every name, string and number replaced by its kind


class Repeat(NamedTuple):
    first: tuple[str, int]
    second: tuple[str, int]
    lines: int
    same_to_the_letter: bool

    def __str__(self) -> str:
        how = "" if self.same_to_the_letter else " (same shape)"
        return (f"{self.first[0]}:{self.first[1]} ~ {self.second[0]}:{self.second[1]}, "
                f"{self.lines} lines{how}")


PUNCTUATION = set("()[]{},:;.")
# What makes a line logic rather than a declaration, in its shape form.
LOGIC_KEYWORDS = {"if", "elif", "else", "for", "while", "return", "try", "except", "finally",
                  "with", "raise", "yield", "await", "lambda", "and", "or", "not", "in", "is",
                  "assert", "del", "break", "continue"}
OPERATORS = {"+", "-", "*", "/", "//", "%", "**", "<", ">", "<=", ">=", "==", "!=", "+=", "-=",
             "*=", "/=", "@", "~", "&", "^", "<<", ">>", "->"}


def _skipped_lines(tree: ast.Module) -> set[int]:
    """Lines of docstrings and imports: they explain or name, they hold no logic to share."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            skipped.update(range(node.lineno, node.end_lineno + 1))
        elif (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
              and node.body and isinstance(node.body[0], ast.Expr)
              and isinstance(node.body[0].value, ast.Constant)
              and isinstance(node.body[0].value.value, str)):
            skipped.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    return skipped


def code_lines(source: str) -> list[Line]:
    """The lines that count, each in its exact and its shape form."""
    skipped = _skipped_lines(ast.parse(source))
    exact: dict[int, list[str]] = {}
    shape: dict[int, list[str]] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        number = token.start[0]
        if number in skipped or token.type in (
                tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if token.type == tokenize.NAME and not keyword.iskeyword(token.string):
            kind = "N"
        elif token.type == tokenize.STRING:
            kind = "S"
        elif token.type == tokenize.NUMBER:
            kind = "0"
        else:
            kind = token.string
        exact.setdefault(number, []).append(token.string)
        shape.setdefault(number, []).append(kind)
    return [Line(number, " ".join(exact[number]), " ".join(shape[number]))
            for number in sorted(exact)
            if not set("".join(exact[number])) <= PUNCTUATION]


def is_logic(shape: str) -> bool:
    """A line that does something: not a field, a keyword argument or a def/class header."""
    tokens = shape.split()
    if any(token in LOGIC_KEYWORDS or token in OPERATORS for token in tokens):
        return True
    called_with_arguments = "N (" in shape and not shape.endswith("N (")
    return called_with_arguments and tokens[0] not in ("class", "def", "@", "async")


def product_files(root: Path = ROOT) -> dict[str, str]:
    """Every product module's source, by its path from the project root."""
    return {str(path.relative_to(root)): path.read_text()
            for folder in PRODUCT for path in sorted((root / folder).rglob("*.py"))}


def repeats(files: dict[str, str]) -> list[Repeat]:
    """Every pair of places sharing WINDOW or more code lines, longest run reported once."""
    lines = {name: code_lines(source) for name, source in files.items()}
    seen: dict[tuple[str, ...], list[tuple[str, int]]] = {}
    for name, found in lines.items():
        for start in range(len(found) - WINDOW + 1):
            key = tuple(line.shape for line in found[start:start + WINDOW])
            seen.setdefault(key, []).append((name, start))
    pairs: set[tuple[tuple[str, int], tuple[str, int]]] = set()
    for places in seen.values():
        for i, first in enumerate(places):
            for second in places[i + 1:]:
                if first[0] != second[0] or second[1] - first[1] >= WINDOW:  # not overlapping
                    pairs.add((first, second))
    found_repeats = []
    for first, second in sorted(pairs):
        if ((first[0], first[1] - 1), (second[0], second[1] - 1)) in pairs:
            continue  # the middle of a longer run, reported from where it starts
        length = WINDOW
        while ((first[0], first[1] + length - WINDOW + 1),
               (second[0], second[1] + length - WINDOW + 1)) in pairs:
            length += 1
        a = lines[first[0]][first[1]:first[1] + length]
        b = lines[second[0]][second[1]:second[1] + length]
        windows = [(a[k:k + WINDOW], b[k:k + WINDOW]) for k in range(length - WINDOW + 1)]
        letter = any(all(x.exact == y.exact for x, y in zip(*w, strict=True)) for w in windows)
        logic = any(2 * sum(is_logic(x.shape) for x in w[0]) >= WINDOW for w in windows)
        if not (letter or logic):
            continue
        found_repeats.append(Repeat((first[0], a[0].number), (second[0], b[0].number),
                                    length, letter))
    return found_repeats


def declared(repeat: Repeat) -> bool:
    return any(_matches(repeat, entry) for entry in BOILERPLATE)


def test_product_code_has_no_undeclared_six_line_repeat():
    undeclared = [str(r) for r in repeats(product_files()) if not declared(r)]
    assert undeclared == []


def test_every_declared_boilerplate_still_stands():
    """An entry whose repeat was removed goes too, so the list says only what is true."""
    found = repeats(product_files())
    stale = [entry[:2] for entry in BOILERPLATE
             if not any(declared(r) for r in found if _matches(r, entry))]
    assert stale == []


def _matches(repeat: Repeat, entry: tuple[str, str, str]) -> bool:
    a, b, _ = entry
    return ((fnmatch(repeat.first[0], a) and fnmatch(repeat.second[0], b))
            or (fnmatch(repeat.first[0], b) and fnmatch(repeat.second[0], a)))


LOGIC = """\
def share(rows, limit):
    kept = [row for row in rows if row.score > limit]
    if not kept:
        return 0.0
    total = sum(row.score for row in kept)
    log.info("kept %d", len(kept))
    return total / len(kept)
"""


def test_a_pasted_block_is_found_to_the_letter_and_renamed():
    renamed = (LOGIC.replace("share", "mean").replace("rows", "items").replace("row", "item")
               .replace("0.0", "1.0").replace("kept %d", "items %d"))
    found = repeats({"flows/a.py": LOGIC, "tasks/b.py": "x = 1\n" + LOGIC,
                     "judges/c.py": '"""Doc."""\nimport os\n\n' + renamed})
    assert {(frozenset((r.first[0], r.second[0])), r.lines, r.same_to_the_letter)
            for r in found} == {
        (frozenset(("flows/a.py", "judges/c.py")), 7, False),
        (frozenset(("flows/a.py", "tasks/b.py")), 7, True),
        (frozenset(("judges/c.py", "tasks/b.py")), 7, False),
    }
    assert "flows/a.py:1 ~ tasks/b.py:2, 7 lines" in {str(r) for r in found}


def test_fields_that_read_alike_and_comments_are_not_a_repeat():
    fields = "class A:\n" + "".join(f"    f{i}: int = None  # note {i}\n" for i in range(8))
    other = fields.replace("class A", "class B").replace(": int", ": str")
    assert repeats({"a.py": fields, "b.py": other}) == []
    commented = "# one\n# two\n# three\n# four\n# five\n# six\n# seven\n"
    assert repeats({"a.py": commented + "x = 1\n", "b.py": commented + "y = 2\n"}) == []
