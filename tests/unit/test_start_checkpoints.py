"""A stage reads the ``checkpoints`` topic once at start, however many of its views resume from it, and each view
gets its latest checkpoint (highest position; of equal ones, the last written)."""

from __future__ import annotations

import asyncio

import pytest

from combee_core.models import ViewCheckpoint
from streams.topology import start_checkpoints
from tests.unit.test_stage_decoding import MetricsStage, RecordingContext, _record


def _checkpoint(view: str, position: int, nexts: dict[str, int] | None = None) -> ViewCheckpoint:
    return ViewCheckpoint(view=view, position=position, nexts=nexts or {}, latest={}, written_at="2026-01-01T00:00:00Z")


@pytest.fixture
def topic(monkeypatch) -> tuple[list[bytes | None], list[str]]:
    """The checkpoints topic's values, and the topics read (each a whole read of one topic)."""
    values: list[bytes | None] = []
    reads: list[str] = []

    async def read_topic(bootstrap, profile, name):
        reads.append(name)
        await asyncio.sleep(0)  # let a second view ask while the first read is under way
        return [_record(offset, value, name) for offset, value in enumerate(values)]

    monkeypatch.setattr(start_checkpoints, "read_topic", read_topic)
    return values, reads


async def test_every_view_of_a_stage_resumes_from_one_read_of_the_topic(topic):
    values, reads = topic
    values += [_checkpoint("watch/playbook", 7).to_json_bytes(), _checkpoint("watch/traces/0", 3).to_json_bytes(),
               _checkpoint("watch/traces/1", 9).to_json_bytes(), _checkpoint("other/traces/2", 4).to_json_bytes()]
    stage = MetricsStage(RecordingContext())
    playbook, traces, missing = await asyncio.gather(
        stage.checkpoints.latest("watch/playbook"), stage.checkpoints.under("watch/traces/"),
        stage.checkpoints.latest("watch/promoted"))
    assert playbook is not None and playbook.position == 7 and missing is None
    assert {part: checkpoint.position for part, checkpoint in traces.items()} == {"0": 3, "1": 9}
    assert reads == ["combee.checkpoints"]
    values.append(_checkpoint("watch/playbook", 20).to_json_bytes())  # written after the start: not read again
    assert (await stage.checkpoints.latest("watch/playbook")).position == 7 and len(reads) == 1


async def test_a_view_gets_its_highest_checkpoint_the_last_written_of_equals_and_skips_unreadable_ones(topic):
    values, _ = topic
    values += [_checkpoint("watch/batches", 12, {"pb": 1}).to_json_bytes(),
               _checkpoint("watch/batches", 5).to_json_bytes(),  # an older owner's, written later: lower
               _checkpoint("watch/batches", 12, {"pb": 2}).to_json_bytes(),
               b'{"view": "watch/batches", "position": "far"}']
    ctx = RecordingContext()
    stage = MetricsStage(ctx)
    latest = await stage.checkpoints.latest("watch/batches")
    assert latest is not None and latest.position == 12 and latest.nexts == {"pb": 2}
    await stage.wait_background()
    assert [letter.offset for letter in ctx.letters] == [3]
