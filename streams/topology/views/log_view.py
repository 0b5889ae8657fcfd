"""A live view of a single-partition state topic: every record, in log order, from the beginning, outside any group.

Stages keep their state as a view of the logs they (and their predecessors as owners) write: the batcher of
``batches``, the reducer of ``playbook``. The view lets its owner wait until a given offset has been applied (to
confirm that a record it wrote is the first of its number) or until the topic's current end has (on assignment).

On Tansu a record can show late, below offsets already read (written later than the gapless consumer waits,
docs/broker.md). A view applies its records strictly in log order all the same: a record read past is a hole
(``combee_core.serve.late_records``, the rule the followers of the served topics keep), the view applies nothing after
it until it is read (its position stays at the hole, so a write behind it, a catch-up and a checkpoint wait too), and
reads the topic again from it at once, then after 1-20 s pauses; a hole still open after a minute is read past for
good, as every reader takes it. Each record is applied once, in offset order, whatever the re-reads. Holding the whole
log, not only the playbook behind the hole, keeps every owner's rule as it is (each reads its records in log order).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.errors import CombeeError
from combee_core.log_order import ContiguousNumbers, ResumePoints
from combee_core.models import CombeeModel, ViewCheckpoint, utc_now
from combee_core.topology import Topic
from streams.topology.late_reading import LateReading
from streams.topology.topic_reader import TopicReader
from streams.topology.views.host import ViewHost

log = logging.getLogger(__name__)

M = TypeVar("M", bound=CombeeModel)

VIEW_FETCH_WAIT_MS = 50
"""Long-poll wait of the view's fetches: bounds how long a confirmation waits for a record that is already written. On
Tansu a view idle for a second backs off from it up to the profile's ``idle_fetch_max_wait_ms`` (the first fetch that
brings a record returns to it; ``streams.topology.gapless_consumer``)."""


class LogViewTimeout(CombeeError, TimeoutError):
    """The view did not reach an offset in time (broker slow or gone)."""


class CheckpointedState(Protocol):
    """A view's state that can be written as a :class:`ViewCheckpoint` and resumed from one."""

    def checkpoint(self, position: int) -> tuple[int, dict[str, int], dict[str, int]]:
        """(offset to resume from, number gates there, offsets of records to load first) for the state at
        ``position``."""
        ...

    async def resume(self, checkpoint: ViewCheckpoint, fetch: Callable[[int], Awaitable[ConsumerRecord]]) -> None:
        """Take the checkpoint's gates; ``fetch(offset)`` reads one record of the topic (e.g. ``latest``)."""
        ...


@dataclass
class GatedState:
    """The checkpointable part of a view whose records are numbered per playbook (``ContiguousNumbers``): where to
    resume (``points``: the records its state still needs) and, optionally, single records to load first
    (``latest``: playbook -> offset, given to ``load``)."""

    gate: ContiguousNumbers[str]
    points: ResumePoints = field(default_factory=ResumePoints)
    latest: dict[str, int] = field(default_factory=dict)
    load: Callable[[ConsumerRecord], None] | None = None

    def checkpoint(self, position: int) -> tuple[int, dict[str, int], dict[str, int]]:
        resume, nexts = self.points.resume(position, self.gate.state())
        return resume, nexts, dict(self.latest)

    async def resume(self, checkpoint: ViewCheckpoint, fetch: Callable[[int], Awaitable[ConsumerRecord]]) -> None:
        self.gate.load(checkpoint.nexts)
        for offset in checkpoint.latest.values():
            assert self.load is not None
            self.load(await fetch(offset))


class LogView:
    """Applies every record of a state topic (partition 0) to ``apply``, in order, until closed.

    The topic must be in the stage's ``StageSpec.reads``. With ``state``, the view resumes from the latest checkpoint
    of ``<stage>/<topic>`` on the ``checkpoints`` topic (so a start reads what the checkpoint needs, not the whole
    topic) and writes one every ``view_checkpoint_every`` records.
    """

    def __init__(self, stage: ViewHost, topic: str, apply: Callable[[ConsumerRecord], None],
                 state: CheckpointedState | None = None, *, catch_up_on_assign: bool = False) -> None:
        if stage.spec is not None and topic not in stage.spec.reads:
            raise ValueError(f"stage {stage.name} follows {topic}, which its StageSpec.reads does not list")
        self.catch_up_on_assign = catch_up_on_assign
        """The stage's state depends on it: the runtime catches it up before the stage takes new partitions."""
        self._stage = stage
        self.name = f"{stage.name}/{topic}"
        self._logical = topic
        self.topic = stage.settings.topic(topic)
        self._sending: dict[tuple[str, int], bytes] = {}
        self._outcome: dict[tuple[str, int], bool] = {}
        self._apply = apply
        self._state = state
        self._tp = TopicPartition(self.topic, 0)
        self._checkpointed = 0
        self.applied = 0
        """Records applied since start (a restart from a checkpoint reads fewer than the topic holds)."""
        self.position = 0
        """Offset of the next record to apply."""
        self._advanced = asyncio.Condition()
        self._closed = asyncio.Event()
        self._reader: TopicReader | None = None
        self._late: LateReading | None = None
        self._probe: TopicReader | None = None
        """Measures the topic's end for :meth:`catch_up` (kept open: a catch-up is one request, not a new client)."""

    async def start(self) -> None:
        ctx = self._stage.ctx
        self._reader = await TopicReader(ctx.bootstrap, ctx.profile, what=f"the view {self.name}",
                                         fetch_max_wait_ms=VIEW_FETCH_WAIT_MS).start()
        checkpoint = await self._stage.checkpoints.latest(self.name) if self._state is not None else None
        if checkpoint is None:
            await self._reader.assign([self._tp])
        else:
            assert self._state is not None
            await self._reader.assign({self._tp: checkpoint.position})
            await self._state.resume(checkpoint, self._fetch_at)
            self.position = self._checkpointed = checkpoint.position
            self._reader.seek(self._tp, checkpoint.position)
            log.info("%s: resumed from its checkpoint at offset %d", self.name, checkpoint.position)
        self._late = LateReading(self._reader, f"view {self.name}")
        await self._late.started({self._tp: checkpoint.position if checkpoint is not None else None})
        self._stage.spawn(self._follow(), name=f"{self._stage.name}-view-{self.topic}", service=True)
        self._stage.views.append(self)

    async def _follow(self) -> None:
        assert self._reader is not None and self._late is not None
        reader, late = self._reader, self._late
        try:
            while not self._closed.is_set():
                records = (await reader.fetch(self._tp)).get(self._tp, [])
                now = time.monotonic()
                for record in records:
                    late.new(record, now)
                    if record.offset < self.position or any(hole < record.offset for _, hole in late.holes()):
                        continue  # applied before, or behind a record read past: applied once that one is
                    self._apply(record)
                    self.position = record.offset + 1
                    self.applied += 1
                late.reread(now)
                if not records:
                    continue
                async with self._advanced:
                    self._advanced.notify_all()
                if self._state is not None and self.position - self._checkpointed >= self._every:
                    await self._write_checkpoint()
        finally:
            await asyncio.gather(self._reader.stop(), *([self._probe.stop()] if self._probe is not None else []))

    def origin(self, record: ConsumerRecord, number: tuple[str, int], counts: bool) -> Literal["void", "mine", "other"]:
        """Who wrote a numbered record (``number`` = (playbook, number)) that ``counts`` or not under the reading
        rule: void, this stage (a :meth:`write` waiting for it), or another writer."""
        mine = self._sending.get(number) == record.value
        if mine:
            self._outcome[number] = counts
        elif counts and number in self._sending:
            self._outcome[number] = False  # another writer's record took the number first
        return "void" if not counts else "mine" if mine else "other"

    async def write(self, number: tuple[str, int], payload: bytes) -> bool:
        """Write a numbered record keyed by its playbook, and wait for the view to say whether it counts."""
        self._sending[number] = payload
        try:
            written = await self._stage.ctx.send(self._logical, number[0], payload, wait=True)
            assert written is not None
            await self.reached(written.offset)
            return self._outcome.pop(number, False)
        finally:
            self._sending.pop(number, None)

    @property
    def _every(self) -> int:
        return self._stage.settings.view_checkpoint_every

    async def _write_checkpoint(self) -> None:
        assert self._state is not None
        resume, nexts, latest = self._state.checkpoint(self.position)
        checkpoint = ViewCheckpoint(view=self.name, position=resume, nexts=nexts, latest=latest, written_at=utc_now())
        await self._stage.ctx.send(Topic.CHECKPOINTS, self.name, checkpoint)
        self._checkpointed = self.position

    async def _fetch_at(self, offset: int) -> ConsumerRecord:
        """One record of the topic, before following starts."""
        assert self._reader is not None
        self._reader.seek(self._tp, offset)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batch = await self._reader.fetch(self._tp, timeout_ms=1000, max_records=1)
            for record in batch.get(self._tp, []):
                if record.offset == offset:
                    return record
                if record.offset > offset:
                    raise LookupError(f"{self.topic}: no record at offset {offset}")
        raise LogViewTimeout(f"{self.topic}: could not read offset {offset} within 30 s")

    def close(self) -> None:
        self._closed.set()

    async def reached(self, offset: int, timeout_s: float = 30.0) -> None:
        """Wait until the record at ``offset`` (and every one before it) has been applied; ``timeout_s``, and while a
        record read past holds the view, as long as it is waited for (``HOLE_GIVE_UP_S`` more)."""
        waited = timeout_s
        async with self._advanced:
            try:
                await asyncio.wait_for(self._advanced.wait_for(lambda: self.position > offset), timeout_s)
                return
            except TimeoutError as error:
                if not self.holes():
                    raise LogViewTimeout(f"{self.topic}: view at offset {self.position}, did not reach {offset} "
                                         f"within {timeout_s:.0f} s") from error
            assert self._late is not None  # a record read past holds the view: as long as every reader waits for it
            waited += self._late.late.give_up_s
            try:
                await asyncio.wait_for(self._advanced.wait_for(lambda: self.position > offset),
                                       self._late.late.give_up_s)
            except TimeoutError as error:
                raise LogViewTimeout(f"{self.topic}: view at offset {self.position}, did not reach {offset} within "
                                     f"{waited:.0f} s (a record read past: {self.holes()})") from error

    def holes(self) -> tuple[tuple[str, int], ...]:
        """("topic[0]", offset) of the records read past and not read yet: the view applies nothing after them."""
        return self._late.holes() if self._late is not None else ()

    async def catch_up(self, timeout_s: float = 30.0) -> None:
        """Wait until every record written before this call has been applied."""
        if self._closed.is_set():
            raise LogViewTimeout(f"{self.topic}: the view is closed")
        if self._probe is None:
            ctx = self._stage.ctx
            probe = TopicReader(ctx.bootstrap, ctx.profile, what=f"the end probe of {self.name}")
            try:
                await probe.start()
            except BaseException:  # a start the broker refused leaves a client to close too
                await probe.stop()
                raise
            self._probe = probe
        try:
            end = (await asyncio.wait_for(self._probe.end_offsets([self._tp]), timeout_s))[self._tp]
        finally:
            self._probe.unassign()  # kept open between catch-ups, but not fetching
        if end > 0:
            await self.reached(end - 1, timeout_s)


def model_view(stage: ViewHost, topic: str, model: type[M], take: Callable[[M], object], *,
               catch_up_on_assign: bool = True) -> LogView:
    """A live view handing ``take`` every readable record of ``topic`` as ``model``, in log order (an unreadable one
    is a dead letter, ``ViewHost.read_state``)."""

    def apply(record: ConsumerRecord) -> None:
        value = stage.read_state(record, model)
        if value is not None:
            take(value)

    return LogView(stage, topic, apply, catch_up_on_assign=catch_up_on_assign)
