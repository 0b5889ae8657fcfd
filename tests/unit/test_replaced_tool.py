"""A correction that replaces the named tool a rule does its action with (issue 38, "a correction restated across 3
batches supersedes"): "Sign session tokens with HS256" / "Session tokens should be signed using RS256 keys" flip no
polarity, axis or number, and the judge's "names different things" test read them as two lessons, so the rule was
never challenged. Now one action on one thing done with another named tool is a conflict (a pending challenge,
never a fold or a reinforcement); a tool swapped on another thing, or a common word in the slot, is not.

The pairs are hand-written for this test (none is from ``bench/data``)."""

from __future__ import annotations

import asyncio
from functools import lru_cache

import pytest

from bench.naive_pipeline import restated
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import SemanticJudge
from tests.unit.embedders import minilm_embedder, naive_reducer

CORRECTIONS = [  # (rule, correction): one action on one thing, another named tool
    ("Sign session tokens with HS256.", "Session tokens should be signed using RS256 keys."),
    ("Save exported CSV files as Latin-1.", "Save exported CSV files as UTF-8 text."),
    ("Checksum uploaded files with SHA-1.", "Verify uploaded files with SHA-256 digests; SHA-1 collides."),
    ("Serialize API responses as JSON.", "Serialize API responses as YAML."),
]
NOT_CONFLICTS = [  # another thing, a common word in the slot, or a tool in common
    ("Encrypt database backups with AES-256.", "Encrypt customer emails with AES-128."),
    ("Serialize API responses as JSON.", "Serialize cache entries as MessagePack."),
    ("Send webhook calls with a timeout.", "Send webhook calls with retries."),
    ("Hash API keys with SHA-256 or SHA-512.", "API keys are stored as SHA-256 digests."),
]


@lru_cache(maxsize=1)
def _judge() -> SemanticJudge:
    return SemanticJudge(EmbeddingCache(minilm_embedder()))


@pytest.mark.parametrize(("rule", "correction"), CORRECTIONS)
def test_one_action_on_one_thing_with_another_named_tool_is_a_conflict(rule: str, correction: str) -> None:
    for new, old in ((correction, rule), (rule, correction)):
        verdict = _judge().judge(new, "rules", old, "rules")
        assert verdict.kind == "conflict" and verdict.reason.startswith("instrument"), verdict


@pytest.mark.parametrize(("a", "b"), NOT_CONFLICTS)
def test_another_thing_a_common_word_or_a_shared_tool_is_no_conflict(a: str, b: str) -> None:
    assert _judge().judge(b, "rules", a, "rules").kind != "conflict"


def test_through_the_reducer_a_replaced_tool_restated_in_3_batches_supersedes_and_never_reinforces() -> None:
    rule, correction = CORRECTIONS[0]
    run = asyncio.run(restated(naive_reducer(), rule, [correction] * 3))
    assert (run["superseded"], run["reinforced"]) == (True, False)
