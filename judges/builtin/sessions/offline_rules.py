"""Offline heuristics for the session and per-turn judges (the offline judge, no model).

Registered into `judges.builtin.offline.OFFLINE_RULES` by judge name. Words and coverage are the
offline judge's (`key_words`: lower-cased words of 3+ letters, stop words left out;
`coverage(a, b)`: share of a's key words found in b). The conversation arrives as rendered by
judges/trajectory/render.py: a `Step N · user` / `Step N · assistant` header per step, its
content indented, so the content can never pass for a header.

- A *follow-up* is a user message whose key words are all follow-up words ("Yes", "yes please",
  "Would you like more details?", "Tell me more", "Why?"); a *short* message has at most 6 words.
- The *earlier topic* of a turn is the previous turn: its user message and the assistant's reply.
- A reply *answers* a user message when it covers the message (coverage >= 0.25) and the
  message is no follow-up; or, for a follow-up or a short message, when it covers the earlier
  topic (coverage >= 0.25 of the previous user message or of the previous reply). A follow-up
  with no earlier turn is judged by its own words.
- turn_relevance: "yes" iff the turn's reply answers the turn's user message, the earlier topic
  read from the earlier turns' block.
- turn_groundedness: the turn's reply has coverage >= 0.5 in the documents that turn retrieved.
- turn_correctness: every expected fact of the turn (or its expected response) has coverage
  >= 0.5 in the turn's reply, as the offline correctness rule does for a row.
- conversation_completeness: "yes" iff every user message is answered: a follow-up or short
  one by the assistant's next reply, any other by what the assistant said after it.
- knowledge_retention: the key facts the user gave before the last answered turn are its
  numbers and its capitalised words not first in a sentence (names: "Ana", "Eiffel", "500");
  "no" when the last answer lacks any of them, "yes" when it has them all or there are none.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from judges.builtin.offline import OFFLINE_RULES, coverage, key_words
from judges.trajectory.render import INDENT

THRESHOLD = 0.25
GROUNDED = 0.5
SHORT_WORDS = 6
FOLLOW_UP_WORDS = frozenset(
    "yes yeah yep yup sure please okay thanks thank like love want more details detail tell "
    "continue elaborate explain further absolutely certainly definitely great cool right "
    "correct exactly interesting really".split()
)
_HEADER = re.compile(r"^Step \d+ · ([^·\n]+?)(?: · .*)?$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d+(?:[.,]\d+)*")
_TOOL_CALL_LINE = re.compile(r"^call \S")


class Said(NamedTuple):
    """Who said what in one step of a rendered conversation."""

    who: str  # "user" or "assistant"
    text: str


def conversation(rendered: str) -> list[Said]:
    """The user and assistant messages of a rendered conversation, in order."""
    said: list[Said] = []
    who, lines = None, []
    for line in [*rendered.splitlines(), "Step 0 · end"]:
        header = _HEADER.match(line)
        if header is None:
            lines.append(line.removeprefix(INDENT))
            continue
        if who is not None:
            text = "\n".join(x for x in lines if not (who != "user" and _TOOL_CALL_LINE.match(x)))
            said.append(Said("user" if who == "user" else "assistant", text.strip()))
        label = header.group(1).strip()
        who = label if label == "user" or label.startswith("assistant") else None
        lines = []
    return said


def is_follow_up(message: str) -> bool:
    """A message that only says "go on": every key word a follow-up word (or none at all)."""
    return key_words(message) <= FOLLOW_UP_WORDS


def answers(message: str, reply: str, earlier: list[Said]) -> tuple[bool, str]:
    """Whether `reply` answers `message` given the messages before it, and why."""
    previous_user = next((s.text for s in reversed(earlier) if s.who == "user"), None)
    follow_up = is_follow_up(message)
    if previous_user is None or not (follow_up or len(message.split()) <= SHORT_WORDS):
        measured = coverage(message, reply)
        return measured >= THRESHOLD, f"message words covered {measured:.0%}"
    direct = 0.0 if follow_up else coverage(message, reply)
    if direct >= THRESHOLD:
        return True, f"message words covered {direct:.0%}"
    after = earlier[max(i for i, s in enumerate(earlier) if s.who == "user"):]
    previous_reply = "\n".join(s.text for s in after if s.who == "assistant")
    topic = max(coverage(previous_user, reply), coverage(previous_reply, reply))
    kind = "a follow-up" if follow_up else "a short message"
    return topic >= THRESHOLD, f"{kind}; the earlier topic's words covered {topic:.0%}"


def _reply(ok: bool, why: str, threshold: float) -> dict:
    return {"rationale": f"Offline heuristic, no LLM: {why} (threshold {threshold:.0%}).",
            "rating": "yes" if ok else "no"}


def _turn_relevance(blocks: dict[str, list[str]]) -> dict:
    earlier = conversation("\n".join(blocks.get("earlier_turns", [])))
    ok, why = answers("\n".join(blocks.get("turn_request", [])),
                      "\n".join(blocks.get("turn_response", [])), earlier)
    return _reply(ok, why, THRESHOLD)


def _turn_groundedness(blocks: dict[str, list[str]]) -> dict:
    measured = coverage("\n".join(blocks.get("turn_response", [])),
                        "\n".join(blocks.get("turn_chunk", [])))
    return _reply(measured >= GROUNDED,
                  f"reply words found in the turn's documents {measured:.0%}", GROUNDED)


def _turn_correctness(blocks: dict[str, list[str]]) -> dict:
    reply = "\n".join(blocks.get("turn_response", []))
    if "turn_expected_facts" in blocks:
        expected = [f for f in blocks["turn_expected_facts"][0].splitlines() if f.strip()]
    else:
        expected = blocks.get("turn_expected_response", [""])
    worst = min((coverage(item, reply) for item in expected), default=1.0)
    return _reply(worst >= GROUNDED, f"the least-covered expected item {worst:.0%}", GROUNDED)


def _conversation_completeness(blocks: dict[str, list[str]]) -> dict:
    said = conversation("\n".join(blocks.get("conversation", [])))
    missed = []
    for index, step in enumerate(said):
        if step.who != "user":
            continue
        later = said[index + 1:]
        next_user = next((i for i, s in enumerate(later) if s.who == "user"), len(later))
        brief = is_follow_up(step.text) or len(step.text.split()) <= SHORT_WORDS
        replies = later[:next_user] if brief else later
        reply = "\n".join(s.text for s in replies if s.who == "assistant")
        if not reply or not answers(step.text, reply, said[:index])[0]:
            missed.append(step.text[:60])
    if missed:
        listed = "; ".join(repr(m) for m in missed)
        return _reply(False, f"user request(s) not addressed: {listed}", THRESHOLD)
    return _reply(True, "every user request is addressed", THRESHOLD)


def key_facts(text: str) -> list[str]:
    """Numbers, and capitalised words not first in their sentence: names a user gives."""
    facts: list[str] = []
    for sentence in _SENTENCE.split(text):
        for position, word in enumerate(_WORD.findall(sentence)):
            word = re.sub(r"['’]s$", "", word)
            if word[0].isdigit() or (position > 0 and word[0].isupper() and word != "I"):
                facts.append(word)
    return list(dict.fromkeys(facts))


def _knowledge_retention(blocks: dict[str, list[str]]) -> dict:
    said = conversation("\n".join(blocks.get("conversation", [])))
    last_reply = max((i for i, s in enumerate(said) if s.who == "assistant"), default=None)
    asked = max((i for i, s in enumerate(said[:last_reply]) if s.who == "user"), default=None)
    if last_reply is None or asked is None:
        return _reply(True, "no answered turn to check", THRESHOLD)
    answer = "\n".join(s.text for s in said[asked + 1:] if s.who == "assistant")
    facts = [f for s in said[:asked] if s.who == "user" for f in key_facts(s.text)]
    said_words = {w.lower() for w in _WORD.findall(answer)}
    lost = [f for f in dict.fromkeys(facts) if f.lower() not in said_words]
    if lost:
        return {"rationale": "Offline heuristic, no LLM: the last answer lacks what the user "
                f"said earlier: {', '.join(lost)}.", "rating": "no"}
    why = (f"the last answer keeps all {len(facts)} names and numbers the user gave earlier"
           if facts else "the user gave no names or numbers in earlier turns")
    return {"rationale": f"Offline heuristic, no LLM: {why}.", "rating": "yes"}


OFFLINE_RULES.update({
    "turn_relevance": _turn_relevance,
    "turn_groundedness": _turn_groundedness,
    "turn_correctness": _turn_correctness,
    "conversation_completeness": _conversation_completeness,
    "knowledge_retention": _knowledge_retention,
})
