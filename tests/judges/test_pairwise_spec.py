"""The pairwise judge is a mode of the one judge spec (issue 47 item 2), published as before."""

from __future__ import annotations

import hashlib
import json

from judges.base import PROMPTS_DIR, JudgeSpec
from judges.builtin import BUILTIN_JUDGES
from judges.builtin.pairwise import PAIRWISE_JUDGE
from judges.catalogue import JudgeCatalogue, Registry
from judges.fingerprint import fingerprint
from judges.model.settings import LLMSettings
from judges.result_names.pairwise import PAIR_PREFIX, WINRATE_FIELDS
from tasks.dataset.normalise import normalise


def _template_hash(name: str) -> str:
    """The prompt hash computed here, from the files: the shared partials, then the template."""
    digest = hashlib.sha256()
    for path in sorted(PROMPTS_DIR.glob("_*.j2")) + [PROMPTS_DIR / name]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def test_the_pairwise_judge_is_a_judge_spec_of_pairs_that_no_row_meets():
    assert isinstance(PAIRWISE_JUDGE, JudgeSpec)
    assert (PAIRWISE_JUDGE.unit, PAIRWISE_JUDGE.mode) == ("pair", "pairwise")
    assert f"{PAIRWISE_JUDGE.prefix}/" == PAIR_PREFIX  # its fields are where they always were
    row = normalise(0, {"request": "What is 2+2?", "response": "4"}, "r0")
    assert not PAIRWISE_JUDGE.applies_to(row)  # a row alone is never a pair
    assert "two responses" in PAIRWISE_JUDGE.missing_inputs()
    # Binary judges keep their prefix and mode.
    correctness = BUILTIN_JUDGES["correctness"]
    assert (correctness.unit, correctness.mode) == ("row", "answer")
    assert correctness.prefix == "response/llm_judged/correctness"


def test_its_manifest_entry_is_the_one_compare_runs_published():
    assert PAIRWISE_JUDGE.manifest_entry() == {
        "name": "pairwise_rubric", "kind": "pairwise", "per_chunk": False, "version": 2,
        "template": "pairwise.j2", "prompt_hash": _template_hash("pairwise.j2")}
    # A binary judge's entry has the same shape, with its prefix second.
    entry = BUILTIN_JUDGES["safety"].manifest_entry()
    assert list(entry) == ["name", "prefix", "kind", "per_chunk", "version", "template",
                           "prompt_hash"]
    assert entry["prefix"] == "response/llm_judged/safety"


def test_the_fingerprint_reads_the_pairwise_judge_as_any_judge_and_no_digest_moved():
    settings = LLMSettings(model="openai/gpt-4o-mini", temperature=0.0)
    print_ = fingerprint([PAIRWISE_JUDGE], settings)
    identity = {"name": "pairwise_rubric", "model": "openai/gpt-4o-mini",
                "api_base": settings.api_base, "temperature": 0.0,
                "max_tokens": settings.max_tokens, "samples": 1, "version": 2,
                "prompt_hash": _template_hash("pairwise.j2")}
    text = json.dumps({"pairwise": identity}, sort_keys=True, separators=(",", ":"))
    assert print_["digest"] == hashlib.sha256(text.encode()).hexdigest()
    # A compare run plans no judge: its digest is the empty one, as it was before the spec
    # (and a regression's covers its planned row judges only), so no stored baseline reads
    # as "a changed judge".
    assert fingerprint([], settings)["digest"] == hashlib.sha256(b"{}").hexdigest()


def test_the_registry_names_the_pairwise_judge_without_making_it_a_judge_the_night_needs():
    registry = Registry.of([BUILTIN_JUDGES["correctness"]])
    for name in WINRATE_FIELDS:
        assert registry.judge_of(name) is PAIRWISE_JUDGE
    assert registry.pairwise_gated(["winrate"])
    assert not registry.pairwise_gated(["response/llm_judged/correctness/rating/percentage"])
    # The canary checks it on the baseline's own pairs; a gate on it is not an unchecked
    # row judge that makes the night incomplete.
    assert registry.llm_judges(["winrate"]) == []
    assert registry.judge_of("response/llm_judged/correctness/rating/percentage") \
        is BUILTIN_JUDGES["correctness"]


def test_the_catalogue_has_the_pair_judge_beside_its_row_judges():
    catalogue = JudgeCatalogue()
    assert catalogue.pair_judge is PAIRWISE_JUDGE
    assert PAIRWISE_JUDGE not in catalogue.known()  # planning rows never skips or plans it
