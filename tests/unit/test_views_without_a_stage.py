"""A view runs on what it uses of its stage (``streams.topology.views.host.ViewHost``) and on the stage's partition
ownership, so it is tested here without a ``Stage``, a consumer or a broker: a numbered log marks stale the partition
of a playbook this member owns when another writer's record counts there, and only then."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any, TypeVar

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from combee_core.models import CombeeModel, PlaybookVersion, VersionStats
from combee_core.partitions.ownership import PartitionOwnership
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.profile import BrokerProfile
from streams.topology.stage_context import StageContext
from streams.topology.start_checkpoints import StartCheckpoints
from streams.topology.views.host import View, ViewHost
from streams.topology.views.numbered_log import NumberedLog

M = TypeVar("M", bound=CombeeModel)
OWNED, OTHER = TopicPartition("combee.reflections", 0), TopicPartition("combee.reflections", 1)


class HostStandIn:
    """A stage as a view sees it: its name, context and ownership; playbook "pb" arrives on partition 0, the rest
    on partition 1."""

    name = "reduce"
    spec = None

    def __init__(self) -> None:
        self.ctx = StageContext(settings=CombeeSettings.load(env={}), bootstrap="unused:9092",
                                profile=BrokerProfile.for_kind("tansu"), producer=None, stop=asyncio.Event())
        self.checkpoints = StartCheckpoints(self)  # type: ignore[arg-type]
        self.ownership = PartitionOwnership[TopicPartition]()
        self.views: list[View] = []

    @property
    def settings(self) -> CombeeSettings:
        return self.ctx.settings

    def spawn(self, coro: Any, name: str | None = None, *, service: bool = False) -> Any:
        raise AssertionError("nothing runs in the background here")

    def read_state(self, record: ConsumerRecord, model: type[M]) -> M | None:
        return model.from_json_bytes(record.value)

    def owner_partition(self, key: str) -> TopicPartition:
        return OWNED if key == "pb" else OTHER


def _version(playbook_id: str, n: int) -> PlaybookVersion:
    return PlaybookVersion(playbook_id=playbook_id, version=n, parent_version=n - 1, batch_id=n - 1, entries=[],
                           next_entry_number=1, operations=[], lineage=[], stats=VersionStats(batch_size=1, k=1, p=1),
                           content_hash=f"{n:064x}", published_at=datetime(2026, 1, 1, tzinfo=timezone.utc))


def _record(offset: int, version: PlaybookVersion) -> ConsumerRecord:
    value = version.to_json_bytes()
    return ConsumerRecord(topic="combee.playbook", partition=0, offset=offset, timestamp=0, timestamp_type=0,
                          key=version.playbook_id.encode(), value=value, checksum=None, serialized_key_size=2,
                          serialized_value_size=len(value), headers=())


def test_a_foreign_version_for_an_owned_playbook_marks_its_partition_stale_and_the_rest_do_not():
    host = HostStandIn()
    typed: ViewHost = host  # the stand-in is what a view needs
    host.ownership.assign({OWNED, OTHER})
    host.ownership.begin_restore()
    host.ownership.end_restore({OWNED})  # the client kept only partition 0
    taken: list[tuple[str, int, int]] = []
    log: NumberedLog[PlaybookVersion] = NumberedLog(typed, Topic.PLAYBOOK, lambda v, o: taken.append(
        (v.playbook_id, v.version, o)), guarded=True)

    log.view._apply(_record(0, _version("other", 1)))  # not owned here: its owner judges it
    assert host.ownership.take_stale() == (frozenset(), False)
    log.view._apply(_record(1, _version("pb", 1)))  # counts, written by another writer, for an owned playbook
    log.view._apply(_record(2, _version("pb", 1)))  # the number is taken: void
    assert host.ownership.take_stale() == ({OWNED}, False)
    assert taken == [("other", 1, 0), ("pb", 1, 1)]
    assert host.ctx.counters == {"void_versions": 1}


def test_a_view_is_what_the_runtime_catches_up_and_closes():
    host = HostStandIn()
    log: NumberedLog[PlaybookVersion] = NumberedLog(host, Topic.PLAYBOOK, guarded=True)
    view: View = log.view
    assert view.catch_up_on_assign and view.applied == 0
