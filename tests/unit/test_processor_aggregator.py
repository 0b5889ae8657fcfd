"""The aggregators' decisions, driven without a broker or an LLM (``combee_core.aggregate.processor``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from combee_core.aggregate.processor import Aggregator, AggregatorConfig
from combee_core.batch.batching import ShuffleConfig, deal_batch
from combee_core.llm.errors import LLMCallError
from combee_core.models import AddOp, Insight, PartialUpdate, Reflection, ShuffledReflection, Usage
from combee_core.processors.testing import EffectLog
from combee_core.reduce.reduction import ReduceOutcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _copies(n: int = 4) -> list[ShuffledReflection]:
    """The copies of one batch of ``n`` reflections: p = 1, one subgroup (one window)."""
    reflections = [Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=0, model="m",
                              insights=[Insight(section="tools", content=f"lesson {i}")]) for i in range(n)]
    batch = deal_batch("pb", 0, reflections, ShuffleConfig(p=1, subgroups="single"), target_batch_size=n,
                       closed_by="size", closed_at=NOW)
    return list(batch.copies)


async def _answer(items: Sequence[Reflection], context: str) -> ReduceOutcome:
    return ReduceOutcome([AddOp(section="tools", content=f"{len(items)} items, context {context!r}")],
                         Usage(calls=1), 0.25)


async def _fail(items: Sequence[Reflection], context: str) -> ReduceOutcome:
    raise LLMCallError("aggregator", "sim", "the model is down")


async def _context(playbook_id: str, base_version: int) -> str:
    return f"{playbook_id} v{base_version}"


def test_a_complete_window_makes_one_partial_and_acknowledges_its_copies_redeliveries_at_once():
    aggregator, log = Aggregator(AggregatorConfig(model="sim")), EffectLog()
    copies = _copies()
    ready = None
    for number, copy in enumerate(copies):
        effects, ready = aggregator.take(copy, f"c{number}", now=0.0)
        assert effects == [] and (ready is None) == (number < len(copies) - 1)
        if number == 1:
            again, none = aggregator.take(copy, "c1-again", now=0.0)
            assert none is None and log.extend(again) and log.acknowledged() == ["c1-again"]
    assert ready is not None and ready.closed_by == "complete"
    log.extend(asyncio.run(aggregator.aggregate(ready, _answer, _context)))
    [partial] = log.published("partials")
    assert isinstance(partial, PartialUpdate)
    assert partial.trace_ids == ["t0", "t1", "t2", "t3"] and partial.items_read == 4 and partial.missing_items == 0
    assert partial.operations[0].content == "4 items, context 'pb v0'"  # type: ignore[union-attr]
    assert log.acknowledged() == ["c1-again", "c0", "c1", "c2", "c3"]
    assert log.counts() == {"duplicate_copies": 1, "partials": 1}
    late, _ = aggregator.take(copies[0], "late", now=1.0)  # a copy of a closed window changes nothing
    assert [type(e).__name__ for e in late] == ["Count", "Acknowledge"]


def test_a_window_closes_by_timeout_with_what_it_has_and_a_failed_call_is_a_dead_letter_and_an_empty_partial():
    aggregator, log = Aggregator(AggregatorConfig(model="sim", window_timeout_s=10.0)), EffectLog()
    for number, copy in enumerate(_copies()[:3]):
        aggregator.take(copy, f"c{number}", now=0.0)
    assert aggregator.expired(9.9) == []
    [ready] = aggregator.expired(10.0)
    assert ready.closed_by == "timeout" and ready.missing == 1
    log.extend(asyncio.run(aggregator.aggregate(ready, _fail, _context)))
    [letter] = log.rejected()
    assert letter.token is None and letter.error_type == "LLMCallError" and "t0, t1, t2" in letter.reason
    [partial] = log.published("partials")
    assert isinstance(partial, PartialUpdate) and partial.operations == [] and "model is down" in (partial.error or "")
    assert (partial.items_read, partial.missing_items, partial.closed_by) == (0, 4, "timeout")
    assert log.acknowledged() == ["c0", "c1", "c2"]


def test_windows_of_a_revoked_partition_are_formed_again_from_their_redelivered_copies():
    aggregator = Aggregator(AggregatorConfig(model="sim"))
    copies = _copies()
    for number, copy in enumerate(copies[:2]):
        aggregator.take(copy, f"c{number}", now=0.0)
    aggregator.drop([("pb", 0, 0)])
    ready = None
    for number, copy in enumerate(copies):
        effects, ready = aggregator.take(copy, f"again{number}", now=1.0)
        assert effects == []
    assert ready is not None and len(ready.copies) == 4
    log = EffectLog()
    log.extend(asyncio.run(aggregator.aggregate(ready, _answer, _context)))
    assert log.acknowledged() == [f"again{n}" for n in range(4)]


def test_a_partial_carries_the_reflections_verdicts_on_used_entries_once_per_trace_not_the_models_counts():
    from combee_core.aggregate.processor import use_tags
    from combee_core.models import EntryTag, UseTag

    tagged = [Reflection(reflection_id=f"r{i}", trace_id=f"t{i % 2}", playbook_id="pb", seen_version=0, model="m",
                         insights=[], entry_tags=[EntryTag(entry_id="too-00001", tag=tag),
                                                  EntryTag(entry_id="too-00002", tag="neutral")])
              for i, tag in enumerate(["harmful", "harmful", "helpful"])]
    assert use_tags(tagged) == [UseTag(entry_id="too-00001", tag="harmful", trace_id="t0"),
                                UseTag(entry_id="too-00001", tag="harmful", trace_id="t1"),
                                UseTag(entry_id="too-00001", tag="helpful", trace_id="t0")]


def test_windows_of_one_batch_closed_by_timeout_are_said_in_one_line(caplog):
    """A batch whose copies stopped coming closes many windows at once: one warning for the batch, not one per
    window (issue 44: one line per condition)."""
    reflections = [Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=0, model="m",
                              insights=[Insight(section="tools", content=f"lesson {i}")]) for i in range(36)]
    batch = deal_batch("pb", 3, reflections, ShuffleConfig(p=2), target_batch_size=36, closed_by="size",
                       closed_at=NOW)
    aggregator = Aggregator(AggregatorConfig(model="sim", window_timeout_s=10.0))
    first_of_each = {copy.subgroup: copy for copy in reversed(batch.copies)}  # one copy per window arrives
    for number, copy in enumerate(first_of_each.values()):
        aggregator.take(copy, f"c{number}", now=0.0)
    with caplog.at_level("WARNING"):
        due = aggregator.expired(10.0)
    assert len(due) == len(first_of_each) > 1
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"pb batch 3: {len(due)} window(s) closed by timeout after 10 s with {len(due)} of 72")


def test_a_batch_is_aggregated_on_the_version_its_copies_name_and_applied_to_its_base_version():
    """Issue 44: with context lag 1, batch 3 reads version 2 (which exists while batch 2 is reduced), not version 3,
    which it would otherwise wait for; it is still applied to version 3."""
    reflections = [Reflection(reflection_id=f"r{i}", trace_id=f"t{i}", playbook_id="pb", seen_version=2, model="m",
                              insights=[Insight(section="tools", content=f"lesson {i}")]) for i in range(3)]
    for lag, read in ((1, "pb v2"), (0, "pb v3")):
        batch = deal_batch("pb", 3, reflections, ShuffleConfig(p=1, subgroups="single", context_lag=lag),
                           target_batch_size=3, closed_by="idle", closed_at=NOW)
        aggregator, log = Aggregator(AggregatorConfig(model="sim")), EffectLog()
        ready = [aggregator.take(copy, f"c{n}", now=0.0)[1] for n, copy in enumerate(batch.copies)][-1]
        assert ready is not None
        log.extend(asyncio.run(aggregator.aggregate(ready, _answer, _context)))
        [partial] = log.published("partials")
        assert isinstance(partial, PartialUpdate) and partial.base_version == 3
        assert partial.operations[0].content == f"3 items, context {read!r}"  # type: ignore[union-attr]
