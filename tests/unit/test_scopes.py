"""Scopes: the parents setting, the chain of a playbook, and the composed served view within a budget."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import PlaybookEntry
from combee_core.playbook import estimate_tokens, make_entry_id
from combee_core.serve.scopes import ScopeError, compose_view, lift_entries, parse_parents, render_view, scope_chain
from combee_core.settings import CombeeSettings, SettingsError


def entry(section: str, number: int, content: str, helpful: int = 0) -> PlaybookEntry:
    return PlaybookEntry(entry_id=make_entry_id(section, number), section=section, content=content, helpful=helpful,
                         created_version=1, updated_version=1)


CHILD = [entry("strategies", 1, "tenant a: invoices are in euros"), entry("mistakes", 2, "tenant a: never round")]
PARENT = [entry("strategies", 1, "check the units before answering", helpful=3),
          entry("strategies", 2, "restate the question first", helpful=1)]


def test_parents_parse_into_chains_and_bad_settings_fail_with_the_variable_named():
    parents = parse_parents("tenant-a=shared, tenant-b=shared,shared=org")
    assert scope_chain("tenant-a", parents) == ("tenant-a", "shared", "org")
    assert scope_chain("other", parents) == ("other",)
    for bad, said in (("a=b,b=a", "cycle"), ("a=a", "cycle"), ("a=b,a=c", "two parents"), ("a", "child=parent"),
                      ("a=b c", "child=parent")):
        with pytest.raises(ScopeError, match=said):
            parse_parents(bad)
    with pytest.raises(SettingsError, match="COMBEE_PLAYBOOK_PARENTS.*cycle"):
        CombeeSettings.load(env={"COMBEE_PLAYBOOK_PARENTS": "a=b,b=a"})


def test_the_child_and_the_parent_are_both_served_the_child_first_with_ids_that_cannot_collide():
    view = compose_view([("tenant-a", CHILD), ("shared", PARENT)])
    assert view.scopes == ("tenant-a", "shared") and view.omitted == ()
    assert [e.qualified_id for e in view.entries] == ["tenant-a/mis-00002", "tenant-a/str-00001",
                                                      "shared/str-00001", "shared/str-00002"]
    own, inherited = view.text.split("# inherited from playbook shared")
    assert "tenant a: invoices" in own and "check the units" in inherited and "tenant a" not in inherited
    assert "[shared/str-00001]" in view.text and view.tokens == estimate_tokens(view.text)


def test_a_budget_keeps_the_childs_entries_and_drops_the_parents_least_valuable_first():
    whole = compose_view([("tenant-a", CHILD), ("shared", PARENT)])
    without_last = compose_view([("tenant-a", CHILD), ("shared", PARENT)], token_budget=whole.tokens - 1)
    assert without_last.omitted == ("shared/str-00002",)  # helpful 1 < helpful 3
    child_only = compose_view([("tenant-a", CHILD)])
    tight = compose_view([("tenant-a", CHILD), ("shared", PARENT)], token_budget=child_only.tokens)
    assert [e.scope for e in tight.entries] == ["tenant-a", "tenant-a"]
    assert tight.omitted == ("shared/str-00001", "shared/str-00002")


def test_a_child_with_no_entries_of_its_own_is_served_the_parents():
    view = compose_view([("tenant-b", []), ("shared", PARENT)])
    assert [e.scope for e in view.entries] == ["shared", "shared"]
    assert view.text.startswith("# inherited from playbook shared")


contents = st.text(alphabet="abcdefgh ", min_size=1, max_size=60).filter(str.strip)


@settings(max_examples=60, deadline=None)
@given(st.lists(contents, max_size=8), st.lists(contents, max_size=8), st.integers(0, 200))
def test_the_composed_text_is_within_the_budget_and_never_holds_a_parent_entry_while_a_childs_is_left_out(
        child, parent, budget):
    chain = [("c", [entry("s", i + 1, text) for i, text in enumerate(child)]),
             ("p", [entry("s", i + 1, text) for i, text in enumerate(parent)])]
    view = compose_view(chain, token_budget=budget)
    assert view.tokens <= budget and view.text == render_view("c", view.entries)
    assert len(view.entries) + len(view.omitted) + len(view.shadowed) == len(child) + len(parent)
    if any(name.startswith("c/") for name in view.omitted):
        assert all(item.scope == "c" for item in view.entries)


def test_a_lifted_lesson_is_added_to_the_parent_once_and_not_repeated_in_the_childs_view():
    lifted = lift_entries(CHILD, ["str-00001", "str-00001"], PARENT, next_entry_number=3, version=5)
    assert [e.entry_id for e in lifted] == ["str-00001", "str-00002", "str-00003"]
    new = lifted[-1]
    assert new.content == CHILD[0].content and (new.helpful, new.created_version) == (0, 5)
    assert lift_entries(CHILD, ["str-00001"], lifted, next_entry_number=4, version=6) == lifted  # already held
    with pytest.raises(ScopeError, match="no entry str-09999"):
        lift_entries(CHILD, ["str-09999"], PARENT, 3, 5)
    view = compose_view([("tenant-a", CHILD), ("shared", lifted)])
    assert view.shadowed == ("shared/str-00003",)
    assert view.text.count("invoices are in euros") == 1
    assert "invoices are in euros" in compose_view([("tenant-b", []), ("shared", lifted)]).text
