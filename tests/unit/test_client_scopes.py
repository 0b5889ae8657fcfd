"""The Python client of a child playbook without a broker: it follows its ancestors' served versions from the log,
keeps them in its cache file (read back only for the same parents), and renders the composed view."""

from __future__ import annotations

import socket

from combee_client import CombeeClient
from combee_client.cache import cache_of, load_cache, save_cache
from combee_client.follow import FollowState, ServedFollower
from combee_core.connection import PLAINTEXT
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.testing.playbooks import make_version

CHILD_LESSONS = ("tenant a retries the payment call twice", "tenant a writes invoices in euros")
PARENT_LESSONS = ("retry a network call that timed out", "restate the question first")


CHILD = {n: make_version(n, "tenant-a", CHILD_LESSONS) for n in (1, 2, 3)}
PARENT = {n: make_version(n, "shared", PARENT_LESSONS) for n in (1, 2)}


def child(n: int):
    return CHILD[n]


def parent(n: int):
    return PARENT[n]


def follower(state: FollowState | None = None) -> tuple[ServedFollower, list]:
    seen: list = []
    return ServedFollower("tenant-a", "t.", False, "agent", "localhost:1", PLAINTEXT, state or FollowState(),
                          seen.append, ancestors=("shared",)), seen


def test_the_childs_follower_takes_its_ancestors_versions_and_publishes_when_only_the_parent_changes():
    following, seen = follower()
    for version in (parent(1), child(1), make_version(1, "other")):
        following._take(Topic.PLAYBOOK, version.to_json_bytes())
    following._publish()
    assert following.state.served == child(1) and following.state.inherited == (("shared", parent(1)),)
    following._publish()
    assert len(seen) == 1  # nothing changed: not published again
    following._take(Topic.PLAYBOOK, parent(2).to_json_bytes())
    following._publish()
    assert following.state.served == child(1) and following.state.inherited == (("shared", parent(2)),)
    assert len(seen) == 2


def test_a_log_about_the_parent_only_keeps_the_cached_childs_version():
    following, _ = follower(FollowState(child(3), "cache", (("shared", parent(1)),)))
    following._take(Topic.PLAYBOOK, parent(1).to_json_bytes())
    following._take(Topic.PLAYBOOK, parent(2).to_json_bytes())
    following._publish()
    assert following.state.served == child(3) and following.state.inherited == (("shared", parent(2)),)


def test_the_cache_keeps_the_ancestors_and_is_read_back_only_for_the_same_parents(tmp_path):
    path = tmp_path / "tenant-a.json"
    save_cache(path, cache_of("tenant-a", "t.", False, child(2), [("shared", parent(1))]))
    cached = load_cache(path, "tenant-a", "t.", False, ("shared",))
    assert cached is not None and [(i.playbook_id, i.served) for i in cached.inherited] == [("shared", parent(1))]
    assert load_cache(path, "tenant-a", "t.", False, ()) is None
    assert load_cache(path, "tenant-a", "t.", False, ("org",)) is None


def test_without_a_broker_the_childs_client_renders_the_composed_view_from_its_cache(tmp_path):
    path = tmp_path / "tenant-a.json"
    save_cache(path, cache_of("tenant-a", "t.", False, child(2), [("shared", parent(1))]))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    with CombeeClient("tenant-a", bootstrap=closed, topic_prefix="t.", promotion=False, cache_path=path,
                      settings=CombeeSettings.load(env={"COMBEE_PLAYBOOK_PARENTS": "tenant-a=shared"})) as client:
        served = client.get()
        assert (served.version, served.source) == (2, "cache") and served.view is not None
        assert [e.scope for e in served.view.entries] == ["tenant-a", "tenant-a", "shared", "shared"]
        rendering = client.render("the network call timed out: retry it", k=2)
        assert set(rendering.entry_ids) == {"tenant-a/tenant-a-0", "shared/shared-0"}
        assert "# inherited from playbook shared" in rendering.text
        trace = client.trace_of("the network call timed out: retry it", "retried")
        assert set(str(trace.metadata["used_entries"]).split(",")) == set(rendering.entry_ids)
