"""A controller restarted from its checkpoint's offsets decides as one that read the whole logs
(``combee_core.control.processor.resume_offset``)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from combee_core.control.processor import Controller, resume_offset
from combee_core.models import BatchMetrics
from combee_core.settings import CombeeSettings

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_resume_offset_keeps_each_playbook_s_last_records() -> None:
    log = [(0, "a"), (1, "b"), (2, "a"), (3, "a"), (4, "a"), (5, "b")]
    assert resume_offset(log, keep=2) == 1  # b's two records start at 1; a's last two at 3
    assert resume_offset(log, keep=1) == 4
    assert resume_offset([], keep=3) is None
    with pytest.raises(ValueError, match="keep"):
        resume_offset(log, keep=0)


def _log(count: int, seed: int) -> list[tuple[int, BatchMetrics]]:
    """Metrics of two playbooks, interleaved, batches growing from 40 to 100 at a stream's pace."""
    rng, log, batch = random.Random(seed), [], {"pa": 0, "pb": 0}
    at = 0.0
    for offset in range(count):
        playbook = rng.choice(["pa", "pb"])
        size = min(100, 40 + 3 * batch[playbook])
        at += size / 20.0
        cycle = 3.0 + 0.02 * size + rng.random()
        log.append((offset, BatchMetrics(playbook_id=playbook, batch_id=batch[playbook], version=batch[playbook] + 1,
                                         batch_size=size, k=3, delay_s=cycle + rng.random(), round_s=cycle,
                                         llm_critical_path_s=cycle, llm_calls=4,
                                         batch_closed_at=T0 + timedelta(seconds=at))))
        batch[playbook] += 1
    return log


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("objective", ["stream", "delay"])
def test_a_controller_restored_from_the_resume_offset_decides_as_one_that_read_everything(seed, objective) -> None:
    settings = CombeeSettings.load(env={}, auto_batch_size=True, fleet_mode="async", controller_objective=objective)
    log = _log(400, seed)
    whole, resumed = Controller(settings), Controller(settings)
    start = resume_offset([(offset, m.playbook_id) for offset, m in log], keep=whole.samples_kept)
    assert start is not None and start > 0  # the restart skips most of the log
    for offset, metrics in log:
        whole.observe(metrics)
        if offset >= start:
            resumed.observe(metrics)
    for playbook in ("pa", "pb"):
        assert resumed.controller(playbook).samples == whole.controller(playbook).samples
        assert resumed.controller(playbook).decide() == whole.controller(playbook).decide()
        if objective == "stream":
            assert resumed.stream(playbook).choose() == whole.stream(playbook).choose()
