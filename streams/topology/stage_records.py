"""How a stage reads records: its input decoded into the stage's model, and state records parsed, each the one place
where a record that cannot be read becomes a dead letter with its reason (and, for an input, counts as done)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from combee_core.errors import one_line
from combee_core.models import CombeeModel
from streams.topology.dead_letters import make_dead_letter, readable_ids

if TYPE_CHECKING:
    from streams.topology.stage_context import StageContext

M = TypeVar("M", bound=CombeeModel)


@dataclass(frozen=True)
class Delivery:
    """A consumed record and its value, decoded into the stage's :attr:`Stage.input_model`."""

    record: ConsumerRecord
    value: Any

    @property
    def partition(self) -> TopicPartition:
        return TopicPartition(self.record.topic, self.record.partition)


class RecordReading:
    """The reading half of a ``streams.topology.runtime.Stage`` (which it is mixed into)."""

    name: str
    ctx: StageContext
    input_model: type[CombeeModel] | None = None
    """What every record of ``consumes`` is decoded into before :meth:`handle` sees it (None: the raw bytes). A
    ``Stage`` with a ``spec`` takes its input topic's declared model unless its class says otherwise."""
    input_label = "record"
    """What the dead letter of a record that cannot be decoded calls it ("unreadable <label>: <why>"); with a
    ``spec``, the declaration's ``TopicSpec.record``."""

    def decode(self, raw: bytes | None) -> Any:
        """A record's value as :attr:`input_model`; raises ``ValueError`` saying what is wrong (override for a
        stricter reading, as the reflector's of traces). Whatever else a decoder raises on hostile bytes (a
        ``RecursionError`` for deep nesting, a ``TypeError`` for a value of the wrong type) is a dead letter too."""
        if self.input_model is None:
            return raw
        return self.input_model.from_json_bytes(raw)

    def unreadable_reason(self, error: Exception) -> str:
        """The dead letter's reason for a record :meth:`decode` refused (a ``ValueError`` says what is wrong; any
        other failure is named by its type, in one line)."""
        return f"unreadable {self.input_label}: {error if isinstance(error, ValueError) else one_line(error)}"

    async def decode_fetch(self, records: list[ConsumerRecord]) -> list[Delivery]:
        """Decode the records of one fetch: the one place where an input record that cannot be read becomes a dead
        letter (the stage, the reason, the original bytes and whatever ids can be read from them) and counts as done;
        the others are returned with their values, in order."""
        deliveries = []
        for record in records:
            try:
                deliveries.append(Delivery(record, self.decode(record.value)))
            except Exception as error:  # any failure to read one record is about that record (its bytes are the
                # decoder's only input): a dead letter with the reason, never a stopped stage (Kafka Connect's
                # errors.tolerance=all). ValidationError and JSONDecodeError are ValueErrors; deep nesting raises
                # RecursionError, a wrong type in a library's hands TypeError or AttributeError
                await self.reject(record, self.unreadable_reason(error), error, **readable_ids(record.value))
        return deliveries

    async def reject(
        self,
        record: ConsumerRecord,
        reason: str,
        error: BaseException | str,
        *,
        trace_id: str | None = None,
        playbook_id: str | None = None,
    ) -> None:
        """Send a consumed record to the dead-letter topic with the reason, and count it as done."""
        await self.ctx.dead_letter(
            make_dead_letter(self.name, reason, error, record.value, topic=record.topic, partition=record.partition,
                             offset=record.offset, key=record.key, trace_id=trace_id, playbook_id=playbook_id)
        )
        self.done(record)

    def read_state(self, record: ConsumerRecord, model: type[M]) -> M | None:
        """Parse a state-topic record (a live view's, a checkpoint, a re-read at assignment): the one place where a
        state record that cannot be read becomes a dead letter with its reason, and the rebuild goes on without it."""
        try:
            return model.from_json_bytes(record.value)
        except Exception as error:  # as an input's (decode_fetch): any failure is about this record
            self.ctx.count("unreadable_state_records")
            why = error if isinstance(error, (ValueError, ValidationError)) else one_line(error)
            self.spawn(self.ctx.dead_letter(make_dead_letter(
                self.name, f"unreadable {model.__name__} in {record.topic}: {why}", error, record.value,
                topic=record.topic, partition=record.partition, offset=record.offset, key=record.key,
                **readable_ids(record.value))))
            return None

    def done(self, record: ConsumerRecord) -> None:  # the Stage's
        raise NotImplementedError

    def spawn(self, coro: Any, name: str | None = None, *, service: bool = False) -> Any:  # the Stage's
        raise NotImplementedError
