"""The reducer's decisions from its logs (combee_core/reduce/reducer_state.py): what the next version is built
on, which manifests wait for a version, and which batches are reported as stalled."""

from __future__ import annotations

from datetime import timedelta

from combee_core.reduce.reducer_state import ReducerLogs
from tests.unit.test_processor_reducer import NOW, _manifest
from tests.unit.test_promotion import _decide, _version


def test_without_promotion_the_next_version_is_built_on_the_newest():
    logs = ReducerLogs()
    assert logs.base("pb")[0].version == 0  # nothing yet: the empty playbook
    logs.take_version(_version(1, ["a"]))
    playbook, parent = logs.base("pb")
    assert playbook.version == 1 and parent is None


def test_with_promotion_the_next_version_waits_for_the_decision_and_a_rejected_one_is_not_built_on():
    logs = ReducerLogs(promotion=True)
    logs.take_version(_version(1, ["a"]))
    assert logs.base("pb") is None  # v1 awaits its decision
    assert logs.take_decision(_decide(logs.ledger, _version(1, ["a"]), 0.6, 0.4))
    logs.take_version(_version(2, ["a", "bad"]))
    assert logs.take_decision(_decide(logs.ledger, _version(2, ["a", "bad"]), 0.2, 0.6))
    playbook, parent = logs.base("pb")
    assert parent == 1 and [e.content for e in playbook.entries] == ["a"] and playbook.version == 2


def test_manifests_wait_until_their_version_and_a_stalled_batch_is_reported_once():
    logs = ReducerLogs()
    assert logs.take_manifest(_manifest(0, ["t1"])) and logs.take_manifest(_manifest(1, ["t2"]))
    later = NOW + timedelta(seconds=100)
    assert logs.stalled({"pb"}, later, 200) == []
    [stalled] = logs.stalled({"pb"}, later, 50)
    assert stalled.manifest.batch_id == 0 and stalled.age_s == 100
    assert logs.stalled({"pb"}, later, 50) == []  # once
    assert logs.stalled(set(), later + timedelta(seconds=1000), 50) == []  # only owned playbooks
    logs.take_version(_version(1, ["a"]))
    assert list(logs.manifests["pb"]) == [1]  # batch 0 is in v1
    assert not logs.take_manifest(_manifest(0, ["t1"]))  # a batch already in a version is not kept
