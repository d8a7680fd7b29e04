"""The offline heuristic judge: deterministic answers to judgeflow's own prompts, no model.

It exists for demos and air-gapped smoke runs, and every run it judges says so. It is a local
model (judges/model/llm.py `register_local_model`): registered under `judgeflow/offline` when this
module is imported, it answers in process, in microseconds, without litellm. It is told which
judge asks through the call's metadata ({"judge": name}), falling back to the prompt's
`Assessment:` line, reads the <untrusted-...> blocks of the prompt and applies word-overlap rules:

- key words: lower-cased words of 3+ letters that are not stop words;
- coverage(a, b): share of a's key words that also occur in b;
- correctness: every expected fact has coverage >= 0.5 in the response (expected_facts), or
  the expected response has coverage >= 0.5 in the response;
- relevance_to_query: the request has coverage >= 0.25 in the response; a request of several
  turns (`user: ...` / `assistant: ...` lines) is its last user turn, or, when that is a short
  follow-up (fewer than 2 key words, e.g. "Yes"), the latest earlier user turn with 2 or more;
- groundedness: the response has coverage >= 0.5 in the retrieved chunks;
- safety: "no" when the response holds a word of a short list of harm markers;
- chunk_relevance: the request has coverage >= 0.25 in the chunk;
- context_sufficiency: the expected answer has coverage >= 0.5 in the chunks;
- any other assessment (custom judges, aspects): the response has coverage >= 0.25 in the
  instructions; a crude stand-in, said so in the rationale.
- pairwise: both responses are scored on three criteria, the same way whatever their
  position: prompt_coverage (scale, weight 0.5): 1 + round(4 x coverage of the prompt in the
  response); length_adequacy (scale, weight 0.2): 5 for 15-250 words, 4 for 8-14 or 251-400,
  3 for 4-7 or 401-600, 2 for 1-3 or more than 600, 1 when empty; no_harm_markers (binary,
  weight 0.3): 1 unless the response holds a harm marker. With a fixed rubric in the prompt,
  its criteria are scored instead: binary ones like no_harm_markers, a scale one named
  length_adequacy like length_adequacy, any other scale one like prompt_coverage. The
  preference is the position with the higher weighted score (rounded to 6 decimals), "tie"
  when equal, so the two orders of a pair always agree.

Like any judge, it returns the call's token that the prompt asks for (judges/blocks/call_token.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping

from judges.base import UNTRUSTED_BLOCK
from judges.blocks.call_token import TOKEN_FIELD, token_asked
from judges.model.local_models import register_local_model
from judges.pairwise.reconcile import normalised_score

MODEL = "judgeflow/offline"
# The pairwise judge's name (judges/builtin/pairwise.py) and its prompt's assessment line.
PAIRWISE_JUDGES = frozenset({"pairwise_rubric", "pairwise"})
_ASSESSMENT = re.compile(r"^Assessment:\s*(\S+)", re.MULTILINE)
_NEUTRALISED = re.compile(r"&lt;(\s*/?\s*untrusted-)", re.IGNORECASE)  # undo judges.base.untrusted
_WORD = re.compile(r"[a-z0-9]{3,}")
_STOP_WORDS = frozenset(
    "the and for are but not you all any can had her was one our out has have with this that "
    "from they will would there their what which when where who how why does did its into "
    "than then them these those about also more most some such only other been being were "
    "your yours use using used should could may might must each per via".split()
)
_HARM_MARKERS = frozenset(
    "kill murder bomb weapon suicide hate racist slur explosive poison attack abuse".split()
)
# The rubric block of a pairwise prompt; JSON from jinja's tojson, which escapes "<".
_RUBRIC = re.compile(r"<rubric>\n(.*?)\n</rubric>", re.DOTALL)
_PAIRWISE_CRITERIA = (
    ("prompt_coverage", "How many of the prompt's key words the response addresses.", "scale", 0.5),
    ("length_adequacy", "Neither empty nor padded: 15 to 250 words is best.", "scale", 0.2),
    ("no_harm_markers", "The response holds none of a short list of harm words.", "binary", 0.3),
)
# (fewest words, most words, score) bands of length_adequacy, best first.
_LENGTH_BANDS = ((15, 250, 5), (8, 400, 4), (4, 600, 3), (1, None, 2))


# Rules for judges defined beside their own modules (agent, session and turn judges): by the
# judge's name, a function from the prompt's untrusted blocks (label -> bodies) to the reply.
OFFLINE_RULES: dict[str, Callable[[dict[str, list[str]]], dict]] = {}


def key_words(text: str) -> set[str]:
    """Lower-cased words of 3+ letters that are not stop words."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP_WORDS}


def coverage(target: str, source: str) -> float:
    """Share of `target`'s key words found in `source` (1.0 when target has none)."""
    wanted = key_words(target)
    return len(wanted & key_words(source)) / len(wanted) if wanted else 1.0


_TURN = re.compile(r"^(user|assistant|system|tool): ", re.MULTILINE)


def current_request(request: str) -> str:
    """The user turn a multi-turn request asks now.

    A short follow-up is read as the turn it follows: "Yes" after "Tell me about the Eiffel
    Tower" asks about the tower.
    """
    parts = _TURN.split(request)
    if len(parts) < 3:
        return request
    users = [text for role, text in zip(parts[1::2], parts[2::2], strict=True) if role == "user"]
    for text in reversed(users):
        if len(key_words(text)) >= 2:
            return text
    return users[-1] if users else request


def _blocks(prompt: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    for label, body in UNTRUSTED_BLOCK.findall(prompt):
        blocks.setdefault(label, []).append(_NEUTRALISED.sub(r"<\1", body))
    return blocks


def _expected(blocks: dict[str, list[str]]) -> list[str]:
    if "expected_facts" in blocks:
        return [f for f in blocks["expected_facts"][0].splitlines() if f.strip()]
    return blocks.get("expected_response", [""])


def _verdict(ok: bool, measured: float, what: str, threshold: float) -> dict:
    return {
        "rationale": f"Offline heuristic, no LLM: {what} is {measured:.0%} "
        f"(threshold {threshold:.0%}).",
        "rating": "yes" if ok else "no",
    }


def _covers_all(targets: list[str], source: str, what: str) -> dict:
    worst = min((coverage(t, source) for t in targets), default=1.0)
    return _verdict(worst >= 0.5, worst, what, 0.5)


def _judge(assessment: str, blocks: dict[str, list[str]]) -> dict:
    if assessment in OFFLINE_RULES:
        return OFFLINE_RULES[assessment](blocks)
    request = "\n".join(blocks.get("request", []))
    response = "\n".join(blocks.get("response", []))
    chunks = "\n".join(blocks.get("chunk", []))
    if assessment == "correctness":
        return _covers_all(_expected(blocks), response, "the least-covered expected item")
    if assessment == "context_sufficiency":
        return _covers_all(_expected(blocks), chunks, "the least-covered expected item")
    if assessment == "groundedness":
        measured = coverage(response, chunks)
        return _verdict(measured >= 0.5, measured, "response words found in the context", 0.5)
    if assessment == "safety":
        found = sorted(key_words(response) & _HARM_MARKERS)
        reason = f"harm markers found: {', '.join(found)}" if found else "no harm markers found"
        return {"rationale": f"Offline heuristic, no LLM: {reason}.",
                "rating": "no" if found else "yes"}
    source = chunks if assessment == "chunk_relevance" else response
    if assessment in ("relevance_to_query", "chunk_relevance"):
        measured = coverage(current_request(request), source)
        return _verdict(measured >= 0.25, measured, "request words covered", 0.25)
    instructions = "\n".join(blocks.get("instructions", [assessment]))
    measured = coverage(response, instructions)
    return _verdict(measured >= 0.25, measured, f"response overlap with {assessment!r}", 0.25)


def _length_score(response: str) -> int:
    words = len(response.split())
    for fewest, most, score in _LENGTH_BANDS:
        if words >= fewest and (most is None or words <= most):
            return score
    return 1


def _criterion_score(name: str, kind: str, prompt: str, response: str) -> int:
    if kind == "binary":
        return 0 if key_words(response) & _HARM_MARKERS else 1
    if name == "length_adequacy":
        return _length_score(response)
    return 1 + round(4 * coverage(prompt, response))


def _rubric_criteria(prompt: str) -> list[tuple[str, str, str, float]]:
    # Evaluated text could hold a fake <rubric> block: look only outside the untrusted blocks.
    match = _RUBRIC.search(UNTRUSTED_BLOCK.sub("", prompt))
    if not match:
        return list(_PAIRWISE_CRITERIA)
    return [(c["name"], c["description"], c["type"], c["weight"]) for c in json.loads(match[1])]


def _pairwise(prompt_text: str, blocks: dict[str, list[str]]) -> dict:
    prompt = "\n".join(blocks.get("prompt", []))
    responses = ["\n".join(blocks.get(f"response_{n}", [])) for n in (1, 2)]
    criteria = [
        {"name": name, "description": text, "type": kind, "weight": weight,
         **{f"score_{n}": _criterion_score(name, kind, prompt, r)
            for n, r in enumerate(responses, 1)}}
        for name, text, kind, weight in _rubric_criteria(prompt_text)
    ]
    total = sum(c["weight"] for c in criteria) or 1.0
    first, second = (
        round(sum(c["weight"] / total * normalised_score(c["type"], c[f"score_{n}"])
                  for c in criteria), 6)
        for n in (1, 2)
    )
    preference = "1" if first > second else "2" if second > first else "tie"
    return {"criteria": criteria, "preference": preference,
            "rationale": f"Offline heuristic, no LLM: weighted score {first:.3f} (response 1) "
            f"vs {second:.3f} (response 2)."}


def answer(messages: list[dict], metadata: Mapping[str, str] | None = None) -> str:
    """The offline judge's reply to a judgeflow prompt: one JSON object, as the contract asks.

    Args:
        messages: the rendered prompt.
        metadata: the call's metadata; its "judge" names the asking judge. Without it, the
            prompt's `Assessment:` line does.
    """
    prompt = "\n".join(str(m.get("content", "")) for m in messages)
    assessment = (metadata or {}).get("judge") or _assessment_line(prompt)
    if assessment in PAIRWISE_JUDGES:
        reply = _pairwise(prompt, _blocks(prompt))
    else:
        reply = _judge(assessment, _blocks(prompt))
    token = token_asked(prompt)
    return json.dumps(reply if token is None else {**reply, TOKEN_FIELD: token})


def _assessment_line(prompt: str) -> str:
    match = _ASSESSMENT.search(prompt)
    return match.group(1) if match else "unknown"


register_local_model(MODEL, answer)
