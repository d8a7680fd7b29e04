"""A loopback judge whose verdicts are planted in the evaluated text.

A marker `#<judge>=<action>` anywhere in a prompt's evaluated blocks decides what the server
does for that judge: `no` (verdict no), `fail` (HTTP 500 forever), `flaky` (500 once, then
yes), `ratelimited` (429 with Retry-After once, then yes), `garbage` (non-JSON once, then yes).
Anything else gets a "yes".
"""

from __future__ import annotations

import hashlib
import json
import re
import threading

from tests.fake_llm import Reply, prompt_text

_ASSESSMENT = re.compile(r"^Assessment:\s*(\S+)", re.MULTILINE)


def verdict(rating: str) -> str:
    return json.dumps({"rationale": f"planted {rating}", "rating": rating})


class PlantedJudge:
    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def _first_time(self, text: str) -> bool:
        key = hashlib.sha256(text.encode()).hexdigest()
        with self._lock:
            first = key not in self._seen
            self._seen.add(key)
        return first

    def __call__(self, body: dict) -> Reply:
        messages = body.get("messages", [])
        text = prompt_text({"messages": messages[:2]})  # the original prompt, not a re-ask
        assessment = _ASSESSMENT.search(text).group(1)
        match = re.search(rf"#{re.escape(assessment)}=(\w+)", text)
        action = match.group(1) if match else "yes"
        reask = len(messages) > 2
        if action == "no":
            return Reply(verdict("no"))
        if action == "fail":
            return Reply(status=500)
        first = self._first_time(prompt_text(body))
        if action == "flaky" and first:
            return Reply(status=500)
        if action == "ratelimited" and first:
            return Reply(status=429, headers={"Retry-After": "1"})
        if action == "garbage" and not reask:
            return Reply("I would say it is fine, really.")
        return Reply(verdict("yes"))
