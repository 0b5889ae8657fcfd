"""combee_core.serve.serving: entity tags, long-poll waiting, what changed, versions kept, task context, exposure."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from combee_core.models import PlaybookEntry, PlaybookVersion, VersionStats
from combee_core.playbook import rank_for_task
from combee_core.serve.serving import (
    NOTHING_SERVED_ETAG,
    ContextQuery,
    ServeConfigError,
    ServedTable,
    VersionNotKept,
    as_playbook,
    authorized,
    check_exposure,
    context_for_task,
    etag,
    etag_matches,
    keep_waiting,
    parse_wait,
    render_served,
)

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
TEXTS = ("retry the flaky network call with backoff", "parse dates as ISO 8601 strings", "cache the database query",
         "validate the JSON schema before parsing", "log every network timeout")


def version(n: int, texts: tuple[str, ...] = TEXTS, playbook_id: str = "pb") -> PlaybookVersion:
    entries = [PlaybookEntry(entry_id=f"e{i}", section="tools", content=f"{t} (v{n})", created_version=1,
                             updated_version=n) for i, t in enumerate(texts)]
    digest = PlaybookVersion.compute_hash(playbook_id, n, n - 1, n - 1, entries, [], [])
    return PlaybookVersion(playbook_id=playbook_id, version=n, parent_version=n - 1, batch_id=n - 1, entries=entries,
                           next_entry_number=len(texts), operations=[], lineage=[],
                           stats=VersionStats(batch_size=1, k=1, p=1), content_hash=digest, published_at=NOW)


def test_an_etag_names_the_version_and_content_and_if_none_match_compares_it():
    v1, v2 = version(1), version(2)
    assert etag(v1) != etag(v2) and etag(v1) == etag(version(1))
    assert etag(None) == NOTHING_SERVED_ETAG
    assert etag_matches(etag(v1), etag(v1)) and not etag_matches(etag(v2), etag(v1))
    assert etag_matches(f'"x", W/{etag(v1)}', etag(v1)) and etag_matches("*", etag(v1))
    assert not etag_matches(None, etag(v1)) and not etag_matches("", etag(v1))


def test_a_long_poll_waits_while_the_client_has_the_served_version_or_nothing_is_served():
    tag = etag(version(1))
    assert keep_waiting(tag, tag) and not keep_waiting(tag, etag(version(2)))
    assert keep_waiting(None, NOTHING_SERVED_ETAG) and not keep_waiting(None, tag)


def test_the_table_says_when_the_served_version_changes_including_a_rollback():
    table = ServedTable()
    assert not table.update("pb", None), "nothing served, still nothing"
    v1, v2 = version(1), version(2)
    table.record(v1)
    assert table.update("pb", v1)
    assert not table.update("pb", v1), "the same version again notifies no one"
    table.record(v2)
    assert table.update("pb", v2)
    assert table.update("pb", v1), "a rollback to v1 is a newly served version"
    assert table.playbook_ids() == ["pb"] and table.newest["pb"] == 2


def test_the_table_keeps_the_newest_versions_and_the_served_one_and_says_when_one_is_too_old():
    table = ServedTable(keep=2)
    table.record(version(1))
    table.update("pb", version(1))
    for n in range(2, 6):
        table.record(version(n))
    assert table.version("pb", 5) == version(5) and table.version("pb", 4) == version(4)
    assert table.version("pb", 1) == version(1), "the served version is kept however old"
    with pytest.raises(VersionNotKept, match="older than the 2 newest"):
        table.version("pb", 2)
    assert table.version("pb", 9) is None and table.version("other", 1) is None
    with pytest.raises(ServeConfigError):
        ServedTable(keep=0)


def test_the_context_for_a_task_is_the_most_relevant_entries_within_k_and_the_budget():
    served = version(3)
    task = "the network call timed out; retry it"
    found = context_for_task(served, ContextQuery(playbook_id="pb", task=task, k=2))
    ranked = [e.entry_id for e in rank_for_task(as_playbook("pb", served), task)]
    assert set(found.included_entry_ids) == set(ranked[:2]) and found.version == 3 and found.etag == etag(served)
    assert all(e.content in found.text for e in served.entries if e.entry_id in found.included_entry_ids)
    small = context_for_task(served, ContextQuery(playbook_id="pb", task=task, k=5, token_budget=20))
    assert small.tokens <= 20 and len(small.included_entry_ids) < 5
    assert context_for_task(None, ContextQuery(playbook_id="pb", task=task)).included_entry_ids == []


def test_context_queries_reject_an_empty_task_and_negative_numbers():
    for bad in ({"task": ""}, {"task": "x", "k": -1}, {"task": "x", "token_budget": -1}):
        with pytest.raises(ValueError):
            ContextQuery(playbook_id="pb", **bad)


def test_a_resource_renders_the_served_version_or_says_none_is_served():
    assert "v2" in render_served("pb", version(2)) and TEXTS[0] in render_served("pb", version(2))
    assert "no version served yet" in render_served("pb", None)


def test_binding_beyond_loopback_needs_a_token_and_requests_then_need_it():
    check_exposure(["127.0.0.1", "localhost", "::1"], None)
    check_exposure(["0.0.0.0"], "secret")
    with pytest.raises(ServeConfigError, match="COMBEE_SERVE_TOKEN"):
        check_exposure(["0.0.0.0"], None)
    with pytest.raises(ServeConfigError):
        check_exposure(["192.168.1.5"], "")
    assert authorized(None, None) and authorized("Bearer secret", "secret") and authorized("bearer secret", "secret")
    assert not authorized(None, "secret") and not authorized("Bearer wrong", "secret")
    assert not authorized("Basic secret", "secret")


def test_a_wait_is_a_bounded_number_of_seconds():
    assert parse_wait(None, 60) == 0 and parse_wait("2.5", 60) == 2.5
    for bad in ("x", "-1", "61"):
        with pytest.raises(ValueError, match="wait"):
            parse_wait(bad, 60)
