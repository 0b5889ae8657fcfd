"""Records as models for readers outside the pipeline (``status``, ``tail``, the review page, ``promote``, replay
exports): a record that does not parse is skipped with one warning line per read, never a traceback.

The stages themselves dead-letter such a record (``streams.topology.stage_records``); a reader only reports it, so
one bad record on ``playbook``, ``promoted`` or ``review`` (a hand-made produce, an older client) does not stop a
command that reads the whole topic.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from pydantic import ValidationError

from combee_core.models import CombeeModel, first_error

if TYPE_CHECKING:
    from aiokafka.structs import ConsumerRecord

log = logging.getLogger(__name__)

M = TypeVar("M", bound=CombeeModel)


def unreadable_reason(error: ValueError) -> str:
    """A short reason: the first validation problem (never the input values), or the parser's message."""
    return first_error(error) if isinstance(error, ValidationError) else str(error)[:200]


def readable(records: Iterable[ConsumerRecord], model: type[M]) -> list[M]:
    """Every record that parses as ``model``, in order; the others are skipped and said in one warning line."""
    parsed: list[M] = []
    skipped: list[tuple[ConsumerRecord, ValueError]] = []
    for record in records:
        try:
            parsed.append(model.from_json_bytes(record.value))
        except ValueError as error:
            skipped.append((record, error))
    if skipped:
        first, problem = skipped[0]
        log.warning("skipped %d unreadable record(s) on %s (not a %s); the first at partition %d offset %d: %s",
                    len(skipped), first.topic, model.__name__, first.partition, first.offset,
                    unreadable_reason(problem))
    return parsed
