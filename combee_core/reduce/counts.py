"""Counts a model declares, bounded by the traces behind them.

An ADD's ``support`` and a TAG's ``count`` are numbers a model writes: nothing but the traces it read backs them. A
partial's operations rest on the distinct traces of its window (``PartialUpdate.trace_ids``), a batch's on the
distinct traces of its partials (the version's lineage: the p shuffle copies of a trace count once). So before the
scan each partial's counts are bounded by its traces, and after it (a reducer call can write any number again) the
root's by the batch's; what is cut is recorded in the version as a rejected operation with the declared count and the
reason (``count bound: ...``), never silently. ``apply_operations(max_count=...)`` bounds what one version adds to
an entry's counters over several operations the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from combee_core.models import AddOp, AppliedOperation, Operation, PartialUpdate, TagOp

COUNT_BOUND = "count bound"
"""How the reason of a recorded bound starts."""


def count_limit(traces: int) -> int:
    """The most an ADD's support or a TAG's count may say when ``traces`` distinct traces are behind it (an
    operation exists, so it is backed at least once)."""
    return max(1, traces)


def bound_counts(operations: Sequence[Operation], traces: int, behind: str) -> tuple[list[Operation],
                                                                                  list[AppliedOperation]]:
    """``operations`` with every ADD support and TAG count above :func:`count_limit` of ``traces`` lowered to it,
    and one rejected record per lowered operation (the operation as declared, the reason naming ``behind``: what the
    traces are, e.g. "the 5 distinct traces of partial 3")."""
    limit = count_limit(traces)
    bounded: list[Operation] = []
    records: list[AppliedOperation] = []
    for op in operations:
        declared = op.support if isinstance(op, AddOp) else op.count if isinstance(op, TagOp) else 0
        if declared <= limit:
            bounded.append(op)
            continue
        name = "support" if isinstance(op, AddOp) else "count"
        bounded.append(op.model_copy(update={name: limit}))
        records.append(AppliedOperation(operation=op, outcome="rejected", reason=(
            f"{COUNT_BOUND}: {op.op} {name} {declared} is more than {behind} ({traces}); counted as {limit}, "
            f"the rest rejected")))
    return bounded, records


def bounded_leaves(partials: Sequence[PartialUpdate]) -> tuple[list[list[Operation]], list[AppliedOperation]]:
    """Each partial's operations with their counts bounded by the partial's distinct traces, and the records of
    what was cut (to keep in the version: ``build_version(bounded=...)``)."""
    leaves: list[list[Operation]] = []
    records: list[AppliedOperation] = []
    for partial in partials:
        ops, cut = bound_counts(partial.operations, len(set(partial.trace_ids)),
                                f"the distinct traces of batch {partial.batch_id}'s partial {partial.node}")
        leaves.append(ops)
        records += cut
    return leaves, records
