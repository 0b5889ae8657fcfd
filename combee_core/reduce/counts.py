"""Counts a model declares, bounded by the traces behind them.

An ADD's ``support`` and a TAG's ``count`` are numbers a model writes: nothing but the traces it read backs them. A
partial's operations rest on the distinct traces of its window (``PartialUpdate.trace_ids``), a batch's on the
distinct traces of its partials (the version's lineage: the p shuffle copies of a trace count once). So before the
scan each partial's counts are bounded by its traces, and after it (a reducer call can write any number again) the
root's by the batch's; what is cut is recorded in the version as a rejected operation with the declared count and the
reason (``count bound: ...``), never silently. ``apply_operations(max_count=...)`` bounds what one version adds to
an entry's counters over several operations the same way.

Units: a partial's counts are copies (each reflection copy it read once; within one partial a trace has at most one
copy, so copies are its traces). The root merges the partials, so a trace's p shuffle copies may each stand in one
count: the root's counts are converted to the distinct traces they stand for (``ceil(count / p)``) before they are
bounded by the batch's traces, and everything after that counts traces: the entries' ``helpful``/``harmful`` counters
and the pending challenges' support (``combee_core.playbook.challenges``) alike.
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


def traces_of(count: int, copies_per_trace: int) -> int:
    """The distinct traces ``count`` copies stand for at ``copies_per_trace`` (the shuffle's p): the fewest
    consistent with it, ``ceil(count / p)``, at least 1."""
    return max(1, -(-count // max(1, copies_per_trace)))


def bound_counts(operations: Sequence[Operation], traces: int, behind: str,
                 copies_per_trace: int = 1) -> tuple[list[Operation], list[AppliedOperation]]:
    """``operations`` with every ADD support and TAG count in distinct traces: counted in copies at
    ``copies_per_trace`` (:func:`traces_of`), then lowered to :func:`count_limit` of ``traces`` when above it, with
    one rejected record per lowered operation (the operation as declared, the reason naming ``behind``: what the
    traces are, e.g. "the 5 distinct traces of partial 3"). A conversion alone is no cut and is not recorded."""
    limit = count_limit(traces)
    bounded: list[Operation] = []
    records: list[AppliedOperation] = []
    for op in operations:
        if not isinstance(op, AddOp | TagOp):
            bounded.append(op)
            continue
        name = "support" if isinstance(op, AddOp) else "count"
        declared: int = getattr(op, name)
        counted = traces_of(declared, copies_per_trace)
        if counted <= limit:
            bounded.append(op if counted == declared else op.model_copy(update={name: counted}))
            continue
        bounded.append(op.model_copy(update={name: limit}))
        per = "" if copies_per_trace == 1 else f" ({counted} at {copies_per_trace} copies a trace)"
        records.append(AppliedOperation(operation=op, outcome="rejected", reason=(
            f"{COUNT_BOUND}: {op.op} {name} {declared}{per} is more than {behind} ({traces}); counted as {limit}, "
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
