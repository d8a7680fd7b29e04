"""A token per judge call that the evaluated text cannot know: what makes a reply the judge's own.

Every judge call's prompt ends with one line asking the judge to put the call's token in its
JSON object. An object without it is never a verdict (judges/parsing.py), so a verdict planted
in the evaluated text, echoed or quoted in any disguise, cannot become one; and a reply that
carries it is the judge's, even when it is byte for byte the object the evaluated text holds.

The token is derived, not drawn: HMAC-SHA256 of the call's messages (the evaluated text
included) under $JUDGEFLOW_SIGNING_KEY, or SHA-256 of them when no key is set, 96 bits.
- Cache-compatible: the same call renders the same prompt, token line included, so the reply
  cache (keyed by the messages), a batch request's identity and a re-run all see the same text.
- Safe: the evaluated text is part of what the token is derived from, so a text carrying the
  token of the call that reads it is a fixed point of SHA-256: about 2**96 / (its length) tries
  with no key, and no way at all to compute without the operator's key. Text planted for one
  call cannot carry another call's token either: what a judge reads is in its own prompt.
"""

from __future__ import annotations

import hashlib
import re

from judges.integrity import SigningKey, canonical

TOKEN_FIELD = "token"
_LABEL = "judgeflow/judge-call-token/v1"
_HEX_CHARS = 24  # 96 bits
INSTRUCTION = ('Add this field to your JSON object, copied exactly: "token": "{token}". It marks '
               "the object as your own verdict; an object without it is not taken as one.")
_INSTRUCTION_LINE = re.compile(  # the line INSTRUCTION makes, up to the token it names
    "^" + re.escape(INSTRUCTION.split("{token}")[0]) + f"([0-9a-f]{{{_HEX_CHARS}}})",
    re.MULTILINE)
_BLOCK = re.compile(r"<untrusted-([\w-]+)>\n.*?\n</untrusted-\1>", re.DOTALL)


def call_token(messages: list[dict], key: SigningKey | None) -> str:
    """The token of the call that sends `messages` (before the token line is added)."""
    content = canonical(messages)
    if key is not None:
        return key.mac(_LABEL, {}, content)[:_HEX_CHARS]
    return hashlib.sha256(_LABEL.encode() + b"\n" + content).hexdigest()[:_HEX_CHARS]


def tokened_prompt(messages: list[dict], key: SigningKey | None) -> tuple[list[dict], str]:
    """The messages a judge call sends (its token line added), and the token they ask for.

    What every judge call sends (judges/calls.py), and what an estimate of a call's prompt
    should count.
    """
    token = call_token(messages, key)
    return with_token_line(messages, token), token


def with_token_line(messages: list[dict], token: str) -> list[dict]:
    """`messages` with the token line at the end of the last one.

    At the end, after the evaluated text: the static part of a prompt stays first (a provider's
    prompt cache reuses it), and nothing the evaluated text holds comes after the line.
    """
    line = INSTRUCTION.format(token=token)
    last = dict(messages[-1]) if messages else {"role": "user", "content": ""}
    content = last.get("content")
    if isinstance(content, str):
        last["content"] = f"{content}\n\n{line}" if content else line
    elif isinstance(content, list):
        last["content"] = [*content, {"type": "text", "text": line}]
    else:
        return [*messages, {"role": "user", "content": line}]
    return [*messages[:-1], last]


def token_asked(prompt: str) -> str | None:
    """The token a prompt's token line asks for; lines inside <untrusted-…> blocks don't count.

    For in-process judges that answer judgeflow's prompts (the offline judge) and test doubles.
    """
    found = _INSTRUCTION_LINE.findall(_BLOCK.sub("", prompt))
    return found[-1] if found else None
