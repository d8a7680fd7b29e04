"""judgeflow's metric names as MLflow metric names (docs/mlflow.md, "Metric names").

MLflow accepts letters, digits, `_ - . /` and spaces in a metric name (a colon too, except on a
Windows server: judgeflow maps it, so a run logs the same everywhere), at most 250 characters,
and no name that a path would normalise to another (`a//b`, `a/./b`, a leading or trailing
`/`, a `..` segment). Published names (judges/result_names/) already are; a custom judge's,
an aspect's or a tag's slice name may not be. Each other character becomes `_`, an empty, `.`
or `..` segment becomes `_`, and a mapped name that is too long or would collide with another
name gets `-` and the first 8 hex digits of the sha256 of the original name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

MAX_NAME_LENGTH = 250
_ILLEGAL = re.compile(r"[^\w\-. /]")
_DIGEST_LENGTH = 8


def legal_name(name: str) -> str:
    """`name` with every character and path segment MLflow refuses replaced (maybe too long)."""
    mapped = _ILLEGAL.sub("_", name)
    segments = ["_" if segment in ("", ".", "..") else segment for segment in mapped.split("/")]
    return "/".join(segments)


def _suffixed(name: str, legal: str) -> str:
    suffix = "-" + hashlib.sha256(name.encode()).hexdigest()[:_DIGEST_LENGTH]
    return legal[:MAX_NAME_LENGTH - len(suffix)].rstrip("/") + suffix


def mlflow_names(names: Iterable[str]) -> dict[str, str]:
    """Each name's MLflow name, distinct; names MLflow accepts as they are stay unchanged.

    Names are taken in sorted order, so a run always maps the same names the same way.
    """
    names = sorted(set(names))
    mapping = {name: name for name in names if legal_name(name) == name
               and len(name) <= MAX_NAME_LENGTH}
    taken = set(mapping.values())
    for name in names:
        if name in mapping:
            continue
        legal = legal_name(name)
        if len(legal) > MAX_NAME_LENGTH or legal in taken:
            legal = _suffixed(name, legal)
        mapping[name] = legal
        taken.add(legal)
    return mapping
