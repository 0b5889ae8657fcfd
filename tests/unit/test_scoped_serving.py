"""Serving a child's composed view: the tag over the chain, who is woken, the composed JSON and the context."""

from __future__ import annotations

from combee_core.playbook import estimate_tokens
from combee_core.serve.scoped_serving import affected, chain_etag, composed_context, composed_playbook, render_composed
from combee_core.serve.scopes import split_used
from combee_core.serve.serving import NOTHING_SERVED_ETAG, ContextQuery, context_for_task, etag
from streams.testing.playbooks import make_version

CHILD_LESSONS = ("tenant a retries the payment call twice", "tenant a writes invoices in euros")
PARENT_LESSONS = ("retry a network call that timed out", "restate the question first", "check the units")


def child(n: int):
    return make_version(n, "tenant-a", CHILD_LESSONS)


def parent(n: int):
    return make_version(n, "shared", PARENT_LESSONS)


def test_a_chain_of_one_is_tagged_as_without_scopes():
    assert chain_etag([("pb", make_version(3))], 100) == etag(make_version(3))
    assert chain_etag([("pb", None)], 100) == NOTHING_SERVED_ETAG


def test_the_childs_tag_changes_with_any_scopes_served_version_and_only_then():
    base = chain_etag([("tenant-a", child(2)), ("shared", parent(1))], 500)
    assert base == chain_etag([("tenant-a", child(2)), ("shared", parent(1))], 500)
    assert base.startswith('"2.1-')
    others = {chain_etag([("tenant-a", child(2)), ("shared", parent(2))], 500),
              chain_etag([("tenant-a", child(3)), ("shared", parent(1))], 500),
              chain_etag([("tenant-a", child(2)), ("shared", None)], 500),
              chain_etag([("tenant-a", child(2)), ("shared", parent(1))], 400)}
    assert base not in others and len(others) == 4
    assert chain_etag([("tenant-a", None), ("shared", None)], 500) == NOTHING_SERVED_ETAG
    assert chain_etag([("tenant-a", None), ("shared", parent(1))], 500) != NOTHING_SERVED_ETAG


def test_a_parents_new_version_wakes_its_descendants_and_no_one_else():
    parents = {"tenant-a": "shared", "tenant-b": "shared", "shared": "org"}
    known = ["tenant-a", "shared", "org", "pb"]
    assert affected("org", parents, known) == ["org", "shared", "tenant-a", "tenant-b"]
    assert affected("shared", parents, known) == ["shared", "tenant-a", "tenant-b"]
    assert affected("tenant-a", parents, known) == ["tenant-a"]
    assert affected("pb", {}, ["pb"]) == ["pb"]


def test_the_composed_playbook_holds_both_scopes_in_order_within_the_budget():
    chain = [("tenant-a", child(2)), ("shared", parent(1))]
    view = composed_playbook(chain, None)
    assert [s.playbook_id for s in view.scopes] == ["tenant-a", "shared"]
    assert [s.version for s in view.scopes] == [2, 1]
    scopes = [e.scope for e in view.entries]
    assert scopes == ["tenant-a"] * 2 + ["shared"] * 3
    assert all(e.qualified_id == f"{e.scope}/{e.entry.entry_id}" for e in view.entries)
    assert view.etag == chain_etag(chain, None) and view.tokens == estimate_tokens(view.text)
    tight = composed_playbook(chain, view.tokens - 1)
    assert tight.tokens <= view.tokens - 1 and tight.omitted and all(q.startswith("shared/") for q in tight.omitted)
    text = render_composed(chain, None)
    assert text.startswith("# playbook tenant-a: tenant-a v2 + shared v1 (5 entries)") and view.text in text
    assert "no version served yet" in render_composed([("tenant-a", None), ("shared", None)], None)


def test_the_context_for_a_task_ranks_among_the_composed_entries_within_k_and_the_budget():
    chain = [("tenant-a", child(2)), ("shared", parent(1))]
    task = "the network call timed out: retry it"
    found = composed_context(chain, ContextQuery(playbook_id="tenant-a", task=task, k=2), None)
    assert found.version == 2 and found.etag == chain_etag(chain, None)
    assert set(found.included_entry_ids) == {"shared/shared-0", "tenant-a/tenant-a-0"}  # both mention retrying
    assert "[shared/shared-0]" in found.text and "# inherited from playbook shared" in found.text
    every = composed_context(chain, ContextQuery(playbook_id="tenant-a", task=task, k=5), None)
    tight = composed_context(chain, ContextQuery(playbook_id="tenant-a", task=task, k=5,
                                                 token_budget=every.tokens - 1), None)
    assert tight.tokens <= every.tokens - 1 and 0 < len(tight.included_entry_ids) < 5
    assert set(tight.included_entry_ids) <= set(every.included_entry_ids)


def test_a_childs_context_without_an_ancestor_version_matches_its_own_ranking():
    task = "invoices in euros"
    alone = context_for_task(child(1), ContextQuery(playbook_id="tenant-a", task=task, k=1))
    composed = composed_context([("tenant-a", child(1)), ("shared", None)],
                                ContextQuery(playbook_id="tenant-a", task=task, k=1), None)
    assert [f"tenant-a/{i}" for i in alone.included_entry_ids] == composed.included_entry_ids


def test_used_entries_split_into_the_childs_own_and_the_inherited():
    own, inherited = split_used("tenant-a", ["str-00001", "tenant-a/str-00002", "shared/str-00001",
                                             "tenant-a/str-00002", "org/mis-00003"])
    assert own == ["str-00001", "str-00002"]
    assert inherited == ["shared/str-00001", "org/mis-00003"]
