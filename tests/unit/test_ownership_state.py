"""The pure parts of scaling out: the first-record-wins reading rule, the run audit, and the state a stage drops
or rebuilds when a partition moves (open batches, unconfirmed batches, aggregator windows)."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from combee_core.aggregate.windows import SubgroupWindows
from combee_core.batch.batching import BatchAccumulator, ShuffleConfig, UnconfirmedBatches, deal_batch
from combee_core.log_order import ContiguousNumbers, ResumePoints, valid_manifests, valid_versions
from combee_core.models import DeadLetter, Insight, PartialUpdate, Reflection, Usage
from combee_core.playbook import Playbook
from combee_core.reduce.reduction import ScanResult, build_version
from combee_core.runs.audit import audit_run

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def reflection(i: int, playbook_id: str = "pb") -> Reflection:
    return Reflection(reflection_id=f"r-{i}", trace_id=f"t-{i}", playbook_id=playbook_id, seen_version=0,
                      insights=[Insight(section="general", content=f"insight {i}")], model="sim")


def manifest(batch_id: int, items: range, playbook_id: str = "pb"):
    return deal_batch(playbook_id, batch_id, [reflection(i, playbook_id) for i in items], ShuffleConfig(),
                      target_batch_size=len(items), closed_by="size", closed_at=NOW).manifest


def version(batch_id: int, trace_ids: list[str], playbook_id: str = "pb", parent: int | None = None):
    """A version built on ``parent`` (default: batch_id) from one partial naming ``trace_ids``."""
    partial = PartialUpdate(playbook_id=playbook_id, batch_id=batch_id, level=0, node=0, k=1,
                            base_version=batch_id, operations=[], reflection_ids=[f"r-{t}" for t in trace_ids],
                            trace_ids=trace_ids, items_read=len(trace_ids), expected_items=len(trace_ids),
                            missing_items=0, closed_by="complete", batch_closed_at=NOW, model="sim", usage=Usage(),
                            latency_s=0.0, max_staleness=0)
    base = Playbook(playbook_id=playbook_id, version=batch_id if parent is None else parent, entries=(),
                    next_entry_number=1)
    scan = ScanResult(operations=[], usage=Usage(), levels=0, critical_path_s=0.0)
    return build_version(base, [partial], scan, published_at=NOW).record


@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 5)), max_size=40))
def test_every_reader_keeps_numbers_0_1_2_in_log_order_and_nothing_else(records):
    gate = ContiguousNumbers[str]()
    kept = [(key, n) for key, n in records if gate.accept(key, n)]
    for key in "ab":
        assert [n for k, n in kept if k == key] == list(range(len([1 for k, _ in kept if k == key])))
    # the first record of each number is the one kept: replaying the same log keeps the same records
    again = ContiguousNumbers[str]()
    assert [(key, n) for key, n in records if again.accept(key, n)] == kept


def test_a_fenced_writers_late_manifest_and_version_are_void_for_every_reader():
    first, zombie = manifest(0, range(0, 4)), manifest(0, range(2, 6))
    assert valid_manifests([first, zombie, manifest(1, range(6, 8))]) == [first, manifest(1, range(6, 8))]
    v1, stale_v1 = version(0, ["t-0"]), version(0, ["t-9"])
    assert valid_versions([v1, stale_v1]) == [v1]
    assert valid_versions([version(1, ["t-1"])]) == []  # v2 before any v1 does not count


def test_audit_finds_lost_and_twice_learned_traces_and_conflicting_numbers():
    sent = {f"t-{i}" for i in range(6)}
    batches = [manifest(0, range(0, 3)), manifest(1, range(3, 6)), manifest(1, range(4, 6))]
    versions = [version(0, ["t-0", "t-1", "t-2"]), version(1, ["t-2", "t-3", "t-4"])]
    audit = audit_run(sent, versions, batches, [])
    problems = " | ".join(audit.problems())
    assert audit.missing == ["t-5"] and audit.in_several_lineages == ["t-2"]
    assert audit.conflicting_batches == [("pb", 1)] and audit.void_records == 1
    assert "t-5" in problems and "several" in problems
    first, void, unlisted = audit.explanation  # where the missing trace is: both manifests of batch 1 list it
    assert first.startswith("batch pb/1 manifest #0 (counts") and "1 missing trace(s) ['t-5']" in first
    assert void.startswith("batch pb/1 manifest #1 (void") and "1 missing trace(s) ['t-5']" in void
    assert unlisted.startswith("0 missing trace(s) in no manifest")
    letter = DeadLetter(stage="reduce", reason="not learned", error_type="NotLearned", original_size=0,
                        truncated=False, trace_id="t-5", playbook_id="pb", occurred_at=NOW)
    clean = audit_run(sent, [versions[0], version(1, ["t-3", "t-4"])], batches[:2], [letter])
    assert clean.problems() == [] and clean.learned == 5 and clean.dead_lettered == 1


def test_audit_reports_versions_that_skip_a_batch():
    audit = audit_run({"t-0", "t-1"}, [version(0, ["t-0"]), version(2, ["t-1"], parent=1)], [], [])
    assert audit.versions == {"pb": 2}
    assert audit.not_contiguous and "batch 2" in audit.not_contiguous[0]


def test_a_revoked_playbooks_open_batch_is_dropped_and_its_traces_can_come_back():
    acc = BatchAccumulator(ShuffleConfig(), default_batch_size=4)
    for i in range(3):
        acc.add(reflection(i), 0.0, NOW)
    acc.drop_open("pb")
    assert acc.open_count("pb") == 0 and not acc.is_duplicate(reflection(0))
    assert all(acc.add(reflection(i), 1.0, NOW) is None for i in range(3))
    closed = acc.add(reflection(3), 1.0, NOW)
    assert closed is not None and closed.manifest.trace_ids == ["t-0", "t-1", "t-2", "t-3"]


def test_forgetting_a_playbook_keeps_its_batch_size_and_rebuilds_from_manifests():
    acc = BatchAccumulator(ShuffleConfig(), default_batch_size=4)
    acc.set_target("pb", 2)
    acc.restore(manifest(0, range(0, 2)))
    acc.forget_playbook("pb")
    assert acc.target("pb") == 2 and acc.next_base_version("pb") == 0 and not acc.is_duplicate(reflection(0))


def test_unconfirmed_batches_are_forgotten_once_redelivery_is_over():
    unconfirmed = UnconfirmedBatches(ShuffleConfig())
    unconfirmed.restore(manifest(0, range(0, 3)))
    assert unconfirmed.collect(reflection(0)) is None  # a partial resend: waits for the rest
    unconfirmed.confirm_all()
    assert unconfirmed.batch_of(reflection(1)) is None


def test_dropped_windows_form_again_from_their_redelivered_copies():
    batch = deal_batch("pb", 0, [reflection(i) for i in range(4)], ShuffleConfig(p=2), target_batch_size=4,
                       closed_by="size", closed_at=NOW)
    windows = SubgroupWindows()
    first_window = [c for c in batch.copies if c.subgroup == 0]
    ready = None
    for copy in first_window:
        _, ready = windows.add(copy, 0.0)
    assert ready is not None and windows.add(first_window[0], 0.0)[0] == "late"
    windows.drop([ready.key])  # its call was cancelled on revocation
    outcomes = [windows.add(copy, 1.0) for copy in first_window]
    assert outcomes[-1][0] == "added" and outcomes[-1][1] is not None


def replay(log: list[tuple[str, int, int]], start: int, gates: dict[str, int]) -> dict[str, list[int]]:
    """Numbers each key keeps when a log of (key, number, weight) is read from ``start`` with ``gates``."""
    gate = ContiguousNumbers[str]()
    gate.load(gates)
    kept: dict[str, list[int]] = {}
    for key, number, _ in log[start:]:
        if gate.accept(key, number):
            kept.setdefault(key, []).append(number)
    return kept


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 5)), min_size=1, max_size=60),
       st.integers(1, 12))
def test_a_view_resumed_from_its_checkpoint_keeps_exactly_the_records_its_state_still_needs(items, horizon):
    """A batcher-style view needs, per key, its newest records up to a weight (the dedupe horizon): resuming from
    the checkpoint keeps those records and no older one, however the keys interleave."""
    counters: dict[str, int] = {}
    log = []
    for key, weight in items:
        log.append((key, counters.get(key, 0), weight))
        counters[key] = counters.get(key, 0) + 1
    points, gate = ResumePoints(), ContiguousNumbers[str]()
    for offset, (key, number, weight) in enumerate(log):
        assert gate.accept(key, number)
        points.add(key, offset, number, weight)
        points.keep_newest(key, horizon)
    start, gates = points.resume(len(log), gate.state())
    kept = replay(log, start, gates)
    for key in counters:
        mine = [(number, weight) for k, number, weight in log if k == key]
        needed, total = [], 0
        for number, weight in reversed(mine):
            if needed and total >= horizon:
                break
            needed.insert(0, number)
            total += weight
        assert kept.get(key) == needed


def test_a_view_with_nothing_pending_resumes_at_its_position_and_rejects_old_records():
    points = ResumePoints()
    points.add("pb", 3, 0)
    points.drop_below("pb", 1)
    assert points.resume(10, {"pb": 1}) == (10, {"pb": 1})


def test_status_shows_traces_batched_but_not_in_a_version_and_flags_a_stall():
    from datetime import timedelta

    from streams.topology.observe import RunStatus, format_status, waiting_batches

    old = manifest(1, range(4, 9)).model_copy(update={"closed_at": NOW - timedelta(seconds=400)})
    new = manifest(2, range(9, 12)).model_copy(update={"closed_at": NOW - timedelta(seconds=5)})
    waiting = waiting_batches([manifest(0, range(0, 4)), old, new], {"pb": 1}, NOW)
    assert waiting == {"pb": (8, 400.0)}  # batch 0 is version 1; batches 1 and 2 wait
    report = format_status(RunStatus(versions={"pb": 1}, waiting=waiting, stall_warning_s=180))
    assert "8 trace(s) batched, not yet in a version (oldest batch 400 s ago) STALLED?" in report
    assert "STALLED" not in format_status(RunStatus(versions={"pb": 1}, waiting={"pb": (3, 5.0)}))


def test_a_void_record_says_whether_its_number_was_taken_or_the_log_has_not_reached_it():
    gate = ContiguousNumbers[str]()
    assert gate.accept("pb", 0) and not gate.accept("pb", 0) and not gate.accept("pb", 3)
    assert gate.why_void("pb", 0) == "another record took the number first"
    assert gate.why_void("pb", 3) == "out of order: the log's next number is 1"
