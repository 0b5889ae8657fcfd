"""What a view uses of the stage it serves: :class:`ViewHost` (the live views of state topics and of ``traces``) and
:class:`ConsumerHost` (the backlog watch, which reads the group consumer's positions). The runtime's
``streams.topology.runtime.Stage`` is both; a unit test hands a view a stand-in. The views the runtime runs are
:class:`View`."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.models import CombeeModel
from combee_core.partitions.ownership import PartitionOwnership
from combee_core.settings import CombeeSettings
from combee_core.topology import StageSpec
from streams.topology.stage_context import StageContext
from streams.topology.start_checkpoints import StartCheckpoints

M = TypeVar("M", bound=CombeeModel)


class View(Protocol):
    """A live view a stage runs: caught up before the stage takes new partitions (when its state depends on it),
    closed when the stage stops."""

    catch_up_on_assign: bool
    applied: int
    """Records applied since start."""

    async def catch_up(self) -> None: ...

    def close(self) -> None: ...


class ViewHost(Protocol):
    """The stage a view serves: its name and declaration, its worker's context (clients, ``send``, counters), where
    its views resume, which partitions it owns, and the runtime's background tasks and views list."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> StageSpec | None: ...

    @property
    def ctx(self) -> StageContext: ...

    @property
    def checkpoints(self) -> StartCheckpoints: ...

    @property
    def ownership(self) -> PartitionOwnership[TopicPartition]: ...

    @property
    def views(self) -> list[View]: ...

    @property
    def settings(self) -> CombeeSettings: ...

    def spawn(self, coro: Any, name: str | None = None, *, service: bool = False) -> Any:
        """Run ``coro`` in the background; a ``service`` runs until the stage closes its views."""
        ...

    def read_state(self, record: ConsumerRecord, model: type[M]) -> M | None:
        """A state record as ``model``; None (and a dead letter) when it cannot be read."""
        ...

    def owner_partition(self, key: str) -> TopicPartition:
        """The input partition records keyed ``key`` arrive on."""
        ...


class ConsumerHost(Protocol):
    """The stage whose group consumer a watch reads (high watermarks, positions)."""

    @property
    def settings(self) -> CombeeSettings: ...

    @property
    def consumer(self) -> AIOKafkaConsumer | None: ...

    def held_by_client(self) -> set[TopicPartition]:
        """Owned partitions the Kafka client still holds (asking it about another raises)."""
        ...
