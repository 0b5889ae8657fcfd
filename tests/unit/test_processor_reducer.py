"""The reducer's decisions, driven without a broker or an LLM (``combee_core.reduce.processor``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.llm.errors import LLMCallError
from combee_core.models import AddOp, BatchManifest, BatchMetrics, Operation, PartialUpdate, PlaybookVersion, Usage
from combee_core.playbook import Playbook
from combee_core.processors.effects import Publish
from combee_core.processors.testing import EffectLog
from combee_core.reduce.processor import Reducer, ReducerConfig
from combee_core.reduce.reduction import ReduceOutcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _partial(batch_id: int, node: int, k: int, text: str | None = None) -> PartialUpdate:
    return PartialUpdate(playbook_id="pb", batch_id=batch_id, node=node, k=k, base_version=batch_id,
                         operations=[AddOp(section="general", content=text or f"lesson b{batch_id} n{node}")],
                         reflection_ids=[f"r{batch_id}-{node}"], trace_ids=[f"t{batch_id}-{node}"], items_read=2,
                         expected_items=2, usage=Usage(calls=1), batch_closed_at=NOW)


def _manifest(batch_id: int, trace_ids: list[str]) -> BatchManifest:
    return BatchManifest(playbook_id="pb", batch_id=batch_id, base_version=batch_id, trace_ids=trace_ids,
                         reflection_ids=[f"r{t}" for t in trace_ids], n=len(trace_ids), k=2, p=1, seed=0,
                         subgroup_sizes=[1, 1], target_batch_size=2, closed_by="size", closed_at=NOW)


class Roles:
    """A reducer role that merges by union, or fails."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.contexts: list[str] = []

    async def reduce(self, children: list[list[Operation]], context: str) -> ReduceOutcome:
        self.contexts.append(context)
        if self.fail:
            raise LLMCallError("reducer", "sim", "the model is down")
        return ReduceOutcome([op for ops in children for op in ops], Usage(calls=1), 0.5)


def _reducer(roles: Roles, **config: object) -> Reducer:
    return Reducer(ReducerConfig(deterministic_merge=False, **config), roles.reduce)  # type: ignore[arg-type]


def test_a_batch_is_ready_once_its_k_partials_are_in_and_a_redelivered_partial_is_acknowledged_at_once():
    reducer, log = _reducer(Roles()), EffectLog()
    assert reducer.take(_partial(0, 1, 2), "p1", current_version=0) is None
    assert reducer.ready("pb", 0) is None
    redelivered = log.extend(reducer.take(_partial(0, 1, 2), "p1-again", current_version=0) or [])
    assert log.acknowledged() == ["p1-again"] and log.counts() == {"duplicate_partials": 1}
    assert redelivered[-1].tokens == ("p1-again",)  # type: ignore[union-attr]
    assert reducer.take(_partial(0, 0, 2), "p0", current_version=0) is None
    assert [p.node for p in reducer.ready("pb", 0) or []] == [0, 1]
    stale = reducer.take(_partial(0, 0, 2), "late", current_version=1)  # batch 0 is in version 1 already
    assert stale is not None and log.extend(stale)[-1].tokens == ("late",)  # type: ignore[union-attr]


def test_a_partial_redelivered_while_its_batch_is_being_applied_is_acknowledged_at_once():
    """A duplicate partial that arrives after its batch was taken as ready but before the batch's version counts
    (the reduce call and the version's write take that long) was kept as the first partial of a new batch that never
    became ready: its record was never acknowledged, and the stage's group never committed past it (the zombie fault
    test, 4-5 records of ``partials`` left uncommitted for good)."""
    reducer, log = _reducer(Roles()), EffectLog()
    for node in (0, 1):
        reducer.take(_partial(0, node, 2), f"p{node}", current_version=0)
    partials = reducer.ready("pb", 0)
    assert partials is not None
    during = reducer.take(_partial(0, 1, 2), "p1-again", current_version=0)  # version 1 does not count yet
    assert during is not None and log.extend(during)[-1].tokens == ("p1-again",)  # type: ignore[union-attr]
    log.extend(asyncio.run(reducer.next_version(Playbook.empty("pb"), partials, parent_version=None, manifest=None,
                                                previous_at=None, now=NOW)))
    assert sorted(log.acknowledged()) == ["p0", "p1", "p1-again"]  # type: ignore[type-var]
    assert reducer.pending["pb"].waiting() == {}, "nothing of batch 0 is left waiting"


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_every_partial_taken_is_acknowledged_once_whatever_the_order_and_duplicates(data):
    """Partials of 3 batches (k 1-3) arrive in any order, each node once or more (redeliveries, an aggregator's
    redone window), and each version counts some arrivals after its batch was taken as ready: once every batch is
    in a version, every record taken has been acknowledged exactly once (so the stage commits to its input's end)."""
    ks = data.draw(st.lists(st.integers(1, 3), min_size=3, max_size=3))
    arrivals = [(b, n) for b, k in enumerate(ks) for n in range(k)]
    arrivals += data.draw(st.lists(st.sampled_from(arrivals), max_size=6))
    arrivals = data.draw(st.permutations(arrivals))
    reducer, log = _reducer(Roles()), EffectLog()
    current, taken = 0, []
    writing: list | None = None
    """The effects of the version being written (built before its write; it counts when the write is seen)."""

    def apply_ready() -> list | None:
        partials = reducer.ready("pb", current)
        return None if partials is None else asyncio.run(reducer.next_version(
            Playbook.empty("pb"), partials, parent_version=None, manifest=None, previous_at=None, now=NOW))

    def counts() -> None:
        nonlocal current, writing
        assert writing is not None
        log.extend(writing)
        current, writing = current + 1, None

    for number, (batch, node) in enumerate(arrivals):
        taken.append(token := f"{number}:b{batch}n{node}")
        log.extend(reducer.take(_partial(batch, node, ks[batch]), token, current) or [])
        if writing is None:
            writing = apply_ready()
        elif data.draw(st.booleans(), label="the version counts now"):
            counts()
    while writing is not None or (writing := apply_ready()) is not None:
        counts()
    assert current == len(ks)
    assert sorted(log.acknowledged()) == sorted(taken)  # type: ignore[type-var]


def test_a_version_is_published_numbered_then_its_metrics_then_its_partials_are_acknowledged():
    roles = Roles()
    reducer, log = _reducer(roles), EffectLog()
    for node in (0, 1):
        reducer.take(_partial(0, node, 2), f"p{node}", current_version=0)
    partials = reducer.ready("pb", 0)
    assert partials is not None
    previous = NOW - timedelta(seconds=30)
    effects = log.extend(asyncio.run(reducer.next_version(
        Playbook.empty("pb"), partials, parent_version=None, manifest=_manifest(0, ["t0-0", "t0-1"]),
        previous_at=previous, now=NOW)))
    version, metrics = effects[0], effects[1]
    assert isinstance(version, Publish) and version.number == ("pb", 1) and version.topic == "playbook"
    record = version.value
    assert isinstance(record, PlaybookVersion) and record.lineage == ["t0-0", "t0-1"] and len(record.entries) == 2
    assert isinstance(metrics, Publish) and metrics.topic == "metrics"
    stats = record.stats
    assert metrics.value == BatchMetrics(playbook_id="pb", batch_id=0, version=1, batch_size=2, k=2,
                                         delay_s=stats.delay_s, llm_critical_path_s=stats.llm_critical_path_s,
                                         llm_calls=stats.llm_calls, round_s=30.0,
                                         batch_closed_at=NOW - timedelta(seconds=stats.delay_s))
    assert log.rejected() == [] and log.acknowledged() == ["p0", "p1"]
    assert len(roles.contexts) == 1  # two partials, fan-in 32: one reducer call


def test_a_trace_of_the_batch_no_partial_read_is_a_dead_letter_and_a_failed_call_falls_back_to_the_union():
    reducer, log = _reducer(Roles(fail=True)), EffectLog()
    for node in (0, 1):
        reducer.take(_partial(0, node, 2), f"p{node}", current_version=0)
    partials = reducer.ready("pb", 0)
    assert partials is not None
    log.extend(asyncio.run(reducer.next_version(
        Playbook.empty("pb"), partials, parent_version=None, manifest=_manifest(0, ["t0-0", "t0-1", "t0-lost"]),
        previous_at=None, now=NOW)))
    failed, lost = log.rejected()
    assert failed.token is None and failed.error_type == "LLMCallError" and "union of 2 children" in failed.reason
    assert lost.token is None and lost.error_type == "NotLearned" and lost.trace_id == "t0-lost"
    [record] = log.published("playbook")
    assert isinstance(record, PlaybookVersion) and len(record.entries) == 2  # the union was applied
    [metrics] = log.published("metrics")
    assert isinstance(metrics, BatchMetrics) and metrics.round_s is None
    assert log.acknowledged() == ["p0", "p1"]


def test_a_revoked_playbook_forgets_its_partials():
    reducer = _reducer(Roles())
    reducer.take(_partial(0, 0, 2), "p0", current_version=0)
    reducer.release("pb")
    reducer.take(_partial(0, 1, 2), "p1", current_version=0)
    assert reducer.ready("pb", 0) is None


def test_operations_over_the_change_cap_are_rejected_and_a_dead_letter_says_so_after_the_version():
    from combee_core.models import DeleteOp, PlaybookEntry, UpdateOp

    playbook = Playbook.from_entries("pb", 0, [
        PlaybookEntry(entry_id=f"gen-0000{n}", section="general", content=f"rule {n}", created_version=0,
                      updated_version=0) for n in range(1, 9)])
    storm = [op for n in range(1, 9) for op in (DeleteOp(entry_id=f"gen-0000{n}"),
                                                 UpdateOp(entry_id=f"gen-0000{n}", content="void"))]
    partial = PartialUpdate(playbook_id="pb", batch_id=0, node=0, k=1, base_version=0, operations=storm,
                            items_read=1, expected_items=1, batch_closed_at=NOW)
    reducer, log = _reducer(Roles(), change_cap=0.25), EffectLog()
    effects = log.extend(asyncio.run(reducer.next_version(playbook, [partial], parent_version=None, manifest=None,
                                                          previous_at=None, now=NOW)))
    record = log.published("playbook")[0]
    assert isinstance(record, PlaybookVersion) and len(record.entries) == 8 - 2
    [dead] = log.rejected()
    assert dead.error_type == "ChangeCapReached" and "at most 2 of the 8 entries" in dead.reason
    assert effects.index(dead) > 0 and isinstance(effects[0], Publish)  # only once the version counts


class _Embedder:
    """A stand-in embedder: every text on one axis (all the same meaning), or down."""

    name = "stand-in"

    def __init__(self, down: bool = False, blocks_s: float = 0.0) -> None:
        self.down = down
        self.blocks_s = blocks_s
        self.texts: list[str] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        import time

        import numpy as np

        from combee_core.playbook.embedding import EmbeddingError

        time.sleep(self.blocks_s)  # a hosted model's request, or the offline model's forward pass under load
        if self.down:
            raise EmbeddingError("the embedding server is down")
        self.texts += list(texts)
        return np.ones((len(texts), 4), dtype=np.float32) / 2.0


async def _next_version(embedder: _Embedder) -> list:
    reducer = Reducer(ReducerConfig(), Roles().reduce, embedder)  # type: ignore[arg-type]
    for node, text in enumerate(("Remove duplicate rows before counting.", "Count rows once duplicates are gone.")):
        # one copy of one trace each (p = 1): the summed support is two distinct traces
        one_copy = _partial(0, node, 2, text).model_copy(update={"items_read": 1, "expected_items": 1})
        reducer.take(one_copy, f"p{node}", current_version=0)
    partials = reducer.ready("pb", 0)
    assert partials is not None
    return await reducer.next_version(Playbook.empty("pb"), partials, parent_version=None, manifest=None,
                                      previous_at=None, now=NOW)


def _version_with(embedder: _Embedder) -> tuple[PlaybookVersion, list[object]]:
    effects = asyncio.run(_next_version(embedder))
    record = next(e.value for e in effects if isinstance(e, Publish) and isinstance(e.value, PlaybookVersion))
    return record, effects


def test_the_reducer_curates_by_meaning_with_its_embedder_and_embeds_each_text_once():
    embedder = _Embedder()
    record, _ = _version_with(embedder)
    assert len(record.entries) == 1  # the two wordings are one lesson for this embedder: one ADD, support summed
    (add,) = record.operations
    assert isinstance(add.operation, AddOp) and add.operation.support == 2
    assert len(embedder.texts) == len(set(embedder.texts))


def test_an_embedding_failure_is_a_dead_letter_and_the_version_is_curated_lexically():
    record, effects = _version_with(_Embedder(down=True))
    assert len(record.entries) == 2
    (dead,) = [e for e in effects if type(e).__name__ == "Reject"]
    assert "curated lexically" in dead.reason  # type: ignore[attr-defined]


def test_embedding_runs_off_the_event_loop_so_heartbeats_and_other_stages_go_on():
    async def main() -> int:
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        beating = asyncio.create_task(heartbeat())
        await _next_version(_Embedder(blocks_s=0.5))
        beating.cancel()
        return ticks

    assert asyncio.run(main()) >= 5  # ~25 while the embedder blocks its thread; 0 if it blocked the loop


def test_a_stalled_batch_is_warned_of_with_its_waiting_partials_and_counted_once(caplog):
    from combee_core.reduce.reducer_state import ReducerLogs

    reducer, logs, log = _reducer(Roles()), ReducerLogs(promotion=False), EffectLog()
    logs.take_manifest(_manifest(0, ["t0-0", "t0-1"]))
    reducer.take(_partial(0, 1, 2), "p1", current_version=0)
    late = NOW + timedelta(seconds=120)
    with caplog.at_level("WARNING"):
        log.extend(reducer.stalled(logs.stalled({"pb"}, late, 60.0)))
        log.extend(reducer.stalled(logs.stalled({"pb"}, late, 60.0)))  # each batch is reported once
    assert log.counts() == {"stalled_batches": 1}
    [warning] = [r.getMessage() for r in caplog.records if "still not a version" in r.getMessage()]
    assert "pb: batch 0 (2 traces)" in warning and "partials (1, 2)" in warning


def test_a_published_version_is_said_and_a_missing_manifest_is_warned_of(caplog):
    reducer = _reducer(Roles())
    for node in (0, 1):
        reducer.take(_partial(0, node, 2), f"p{node}", current_version=0)
    partials = reducer.ready("pb", 0)
    assert partials is not None
    with caplog.at_level("INFO"):
        effects = asyncio.run(reducer.next_version(Playbook.empty("pb"), partials, parent_version=None,
                                                   manifest=None, previous_at=None, now=NOW))
        reducer.published(effects, now=0.0)
    messages = [r.getMessage() for r in caplog.records]
    assert any("batch 0: manifest not found" in m for m in messages)
    assert any(m.startswith("published pb v1 (batch 0, 2 entries") for m in messages)
