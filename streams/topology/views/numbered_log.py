"""A stage's view of a numbered state log: the one component for ``batches``, ``playbook`` and ``promoted``.

Records of these topics are numbered per playbook (a batch id, a version, a decision id) and the *first* record of
each number in the log is the one that counts (``combee_core.log_order``; docs/protocol.md, "Reading versions"). A
:class:`NumberedLog` is, for one stage and one such topic declared in its ``StageSpec.reads``:

- the **view**: every record in log order, decoded through the stage's ``read_state`` (an unreadable one is a dead
  letter);
- the **gate**: which records count (``ContiguousNumbers``, or the stage's own rule, e.g. the promotion ledger);
- **write if first**: :meth:`NumberedLog.write` publishes a numbered record and says whether it is the one that
  counts; when another record took the number first it counts ``<topic>_lost`` and, for a guarded log, marks the
  playbook's partition stale (the runtime rebuilds it from the logs);
- **a foreign write marks the partition stale**: a record that counts, written by anyone else for a playbook this
  stage owns (a fenced "zombie", ``combee playbook import``) marks it stale too (expected for an import);
- **checkpoints**: with ``checkpointed``, the gate and the resume points go to ``checkpoints`` every
  ``view_checkpoint_every`` records, so a start reads what the state needs, not the whole log.

What a record *means* to the stage is its ``take(value, offset)``; the decisions stay in ``combee_core``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from aiokafka.structs import ConsumerRecord

from combee_core.log_order import ContiguousNumbers
from combee_core.models import BatchManifest, CombeeModel, PlaybookVersion, PromotionDecision
from combee_core.processors.effects import Publish
from combee_core.runs.seed import is_import_manifest, is_import_version
from combee_core.topology import Topic
from streams.topology.views.host import ViewHost
from streams.topology.views.log_view import GatedState, LogView

log = logging.getLogger(__name__)

M = TypeVar("M", bound=CombeeModel)


@dataclass(frozen=True)
class Numbering:
    """How a numbered topic's records are numbered, named in logs and counted."""

    model: type[CombeeModel]
    number: Callable[[Any], tuple[str, int]]
    first: int
    """The first number of each playbook (versions start at 1)."""
    label: Callable[[str, int], str]
    void: str
    """Counter of records that do not count (a number already taken, or out of order)."""
    lost: str
    """Counter of this stage's writes that another record beat."""
    imported: Callable[[Any], bool] = lambda _: False
    """Whether a record was written by ``combee playbook import`` (a foreign write that is routine)."""


NUMBERED: dict[Topic, Numbering] = {
    Topic.BATCHES: Numbering(BatchManifest, lambda m: (m.playbook_id, m.batch_id), 0,
                             lambda pb, n: f"batch {pb}/{n}", "void_manifests", "batches_lost", is_import_manifest),
    Topic.PLAYBOOK: Numbering(PlaybookVersion, lambda v: (v.playbook_id, v.version), 1,
                              lambda pb, n: f"{pb} v{n}", "void_versions", "versions_lost", is_import_version),
    Topic.PROMOTED: Numbering(PromotionDecision, lambda d: (d.playbook_id, d.decision_id), 0,
                              lambda pb, n: f"{pb} decision {n}", "void_decisions", "decisions_lost"),
}


class NumberedLog(Generic[M]):
    """One stage's view of one numbered state topic (see the module's docstring).

    ``take(value, offset)`` is called for every record that counts; ``accept(value)`` replaces the contiguous gate
    (it says whether the record counts, and takes it) and comes with ``gate``, the gate it counts with, which a
    checkpoint saves and loads and which says why a write was lost; ``guarded``: foreign and lost writes for a
    playbook this stage owns mark its partition stale (``on_foreign(playbook_id)`` is told first); ``checkpointed``:
    the gate and resume points are checkpointed (``state.points`` / ``state.latest`` say what a restart needs).
    """

    def __init__(self, stage: ViewHost, topic: Topic, take: Callable[[M, int], None] | None = None, *,
                 accept: Callable[[M], bool] | None = None, gate: ContiguousNumbers[str] | None = None,
                 guarded: bool = False, checkpointed: bool = False, on_foreign: Callable[[str], None] | None = None,
                 on_lost: Callable[[str], None] | None = None) -> None:
        assert (accept is None) == (gate is None), "a log with its own rule names the gate that rule counts with"
        self.stage = stage
        self.topic = topic
        self.numbering = NUMBERED[topic]
        self.gate = gate if gate is not None else ContiguousNumbers[str](start=self.numbering.first)
        self.state = GatedState(self.gate, load=self._load)
        self._take = take
        self._accept = accept
        self._guarded = guarded
        self._on_foreign = on_foreign
        self._on_lost = on_lost
        self.view = LogView(stage, topic, self._apply, self.state if checkpointed else None, catch_up_on_assign=True)

    async def start(self) -> None:
        await self.view.start()

    async def catch_up(self) -> None:
        await self.view.catch_up()

    def _decode(self, record: ConsumerRecord) -> M | None:
        return cast("M | None", self.stage.read_state(record, self.numbering.model))

    def _apply(self, record: ConsumerRecord) -> None:
        value = self._decode(record)
        if value is None:
            return
        number = self.numbering.number(value)
        counts = self._accept(value) if self._accept is not None else self.gate.accept(*number)
        origin = self.view.origin(record, number, counts)
        if origin == "void":
            self.stage.ctx.count(self.numbering.void)
            return
        playbook_id = number[0]
        if origin == "other" and self._guarded and self._owns(playbook_id):
            imported = self.numbering.imported(value)
            log.log(logging.INFO if imported else logging.WARNING, "%s was written by %s while this one owns the "
                    "playbook", self.numbering.label(*number),
                    "`combee playbook import`" if imported else f"another {self.stage.name} stage")
            self._stale(playbook_id, expected=imported)
        if self._take is not None:
            self._take(value, record.offset)

    def _load(self, record: ConsumerRecord) -> None:
        """A checkpoint's latest record of a playbook (its gate is already set)."""
        value = self._decode(record)
        if value is not None and self._take is not None:
            self._take(value, record.offset)

    def _stale(self, playbook_id: str, *, expected: bool = False, lost: bool = False) -> None:
        told = self._on_lost if lost else self._on_foreign
        if told is not None:
            told(playbook_id)
        self.stage.ownership.mark_stale(self.stage.owner_partition(playbook_id), expected=expected)

    def _owns(self, playbook_id: str) -> bool:
        return self.stage.ownership.owns(self.stage.owner_partition(playbook_id))

    async def write(self, publish: Publish) -> bool:
        """Write a numbered record; True when it is the first of its number (it counts), else False (counted, logged,
        and for a guarded log the playbook's partition is rebuilt from the logs)."""
        assert publish.number is not None and publish.topic == self.topic
        if await self.view.write(publish.number, publish.value.to_json_bytes()):
            return True
        self.stage.ctx.count(self.numbering.lost)
        log.warning("%s: %s; %s", self.numbering.label(*publish.number), self.gate.why_void(*publish.number),
                    "rebuilding from the log" if self._guarded else "deciding again")
        if self._guarded:
            self._stale(publish.number[0], lost=True)
        return False
