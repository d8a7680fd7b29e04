"""How much of a run's input a provider's prompt cache could serve: the prefix each call shares.

Renders every judge call a run of a set makes, in the order judgeflow sends them (rows in
input order; per row, each applicable judge, per chunk for a per-chunk judge; a pair forward
then backward), exactly as the engine renders them, and measures for each call the longest
prefix of its messages it shares with the previous call of the same judge. Two shares:

- shared: those prefixes over all input (characters, and tokens counted with gpt-4o-mini's
  tokenizer): what a provider that caches any shared prefix could serve;
- cacheable (OpenAI's rule): a prefix counts only from 1,024 tokens, in steps of 128, which is
  what OpenAI's automatic prompt caching serves (Anthropic's needs explicit cache_control
  breakpoints and at least 1,024-4,096 tokens, depending on the model).

No model is called. Prints JSON:

    python -m bench.prompt_cache                       # the bundled examples
    python -m bench.prompt_cache --data my.jsonl --judges correctness,safety
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MIN_CACHED_TOKENS, CACHE_STEP = 1024, 128  # OpenAI's prompt caching


def _flat(messages: list[dict]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def row_calls(data: str, judges: list[str] | None = None) -> Iterator[tuple[str, str]]:
    """(judge, rendered messages) of every call an evaluate run of `data` makes, in order."""
    from judges.plan import plan_judges
    from tasks.dataset.sources import read_table
    from tasks.dataset.validation import validate_table

    rows = validate_table(read_table(data)).rows
    plan = plan_judges(rows, judges)
    for row in rows:
        for spec in plan.judges:
            if not spec.applies_to(row):
                continue
            chunks = [c for c in row.retrieved_context or [] if c.content] if spec.per_chunk \
                else [None]
            for chunk in chunks:
                for _ in range(spec.samples):
                    yield spec.name, _flat(spec.render(row, chunk))


def pair_calls(data: str) -> Iterator[tuple[str, str]]:
    """(judge, rendered messages) of every call a compare run of `data` makes, in order."""
    from judges.builtin.pairwise import render
    from tasks.dataset.pairs import validate_nova
    from tasks.dataset.sources import read_table

    for pair in validate_nova(read_table(data)).pairs:
        yield "pairwise", _flat(render(pair.prompt, pair.response_A, pair.response_B, None))
        yield "pairwise", _flat(render(pair.prompt, pair.response_B, pair.response_A, None))


def _tokens(text: str) -> int:
    from judges.model.litellm_door import litellm

    return litellm().token_counter(model="gpt-4o-mini", text=text) if text else 0


def _openai_cached(shared_tokens: int, prompt_tokens: int) -> int:
    if prompt_tokens < MIN_CACHED_TOKENS or shared_tokens < MIN_CACHED_TOKENS:
        return 0
    return MIN_CACHED_TOKENS + (shared_tokens - MIN_CACHED_TOKENS) // CACHE_STEP * CACHE_STEP


def measure(calls: Iterable[tuple[str, str]]) -> dict:
    """The shared and cacheable shares of the calls' input, overall and per judge."""
    previous: dict[str, str] = {}
    judges: dict[str, dict[str, int]] = {}
    for judge, text in calls:
        shared = os.path.commonprefix([previous.get(judge, ""), text])
        previous[judge] = text
        tally = judges.setdefault(judge, dict.fromkeys(
            ("calls", "chars", "shared_chars", "tokens", "shared_tokens", "cacheable_tokens",
             "longest_shared_tokens"), 0))
        tokens, shared_tokens = _tokens(text), _tokens(shared)
        tally["calls"] += 1
        tally["chars"] += len(text)
        tally["shared_chars"] += len(shared)
        tally["tokens"] += tokens
        tally["shared_tokens"] += shared_tokens
        tally["cacheable_tokens"] += _openai_cached(shared_tokens, tokens)
        tally["longest_shared_tokens"] = max(tally["longest_shared_tokens"], shared_tokens)
    total = {key: sum(t[key] for t in judges.values()) for key in
             ("calls", "chars", "shared_chars", "tokens", "shared_tokens", "cacheable_tokens")}
    return {**total, **_shares(total), "judges": {
        name: {**tally, **_shares(tally)} for name, tally in judges.items()}}


def _shares(tally: dict[str, int]) -> dict[str, float]:
    return {"shared_share_chars": tally["shared_chars"] / max(tally["chars"], 1),
            "shared_share_tokens": tally["shared_tokens"] / max(tally["tokens"], 1),
            "cacheable_share_tokens": tally["cacheable_tokens"] / max(tally["tokens"], 1)}


def examples() -> dict:
    """The bundled examples: the RAG set with every applicable judge, the pairs both ways."""
    return {"rag_eval.jsonl, every applicable judge":
            measure(row_calls(str(EXAMPLES / "rag_eval.jsonl"))),
            "pairs.jsonl, pairwise (both orders)":
            measure(pair_calls(str(EXAMPLES / "pairs.jsonl")))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="an evaluation set (default: the bundled examples)")
    parser.add_argument("--judges", help="comma-separated judges (default: every applicable)")
    args = parser.parse_args()
    if args.data:
        judges = args.judges.split(",") if args.judges else None
        result = {args.data: measure(row_calls(args.data, judges))}
    else:
        result = examples()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
