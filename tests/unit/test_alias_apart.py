"""An alias cannot overrule the entry's own text (``combee_core.playbook.aliases.judge_aliases``): a wording the judge
sets apart from an entry's text (another stated scope, another subject: ``Judgement.apart``) is never folded into
the entry through one of its aliases, which rest on a match no one confirmed. Without this, one wording of another
lesson folded in as an alias drew every later wording of that lesson into the entry, raising nothing: the lesson
never got an entry of its own.

The real-judge wordings are this test's own (shipping fees and tax refunds), written for it; none is from the
simulator's registry or a held-out set."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.aliases import actions_differ, judge_aliases
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import Judgement, SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.playbook.uncertain import UncertainJudge

ENTRY = "gen-00001"
FEES = "When a task involves shipping fees, round the charge up to whole cents."
BRIDGE = "Refunds of delivery costs: round the charge up to whole cents."  # close to FEES and to TAX
TAX = "If the question is about tax refunds, round the amount up to whole cents."  # another scope than FEES


def _playbook(content: str, aliases: Sequence[str]) -> Playbook:
    entry = PlaybookEntry(entry_id=ENTRY, section="general", content=content, helpful=3, created_version=1,
                          updated_version=1, aliases=list(aliases))
    return Playbook.from_entries("pb", 1, [entry])


def _add(text: str) -> AddOp:
    return AddOp(section="general", content=text)


@pytest.fixture(scope="module")
def minilm() -> UncertainJudge:
    """The judge after a silent reducer call: MiniLM's verdicts stand, unconfirmed."""
    return UncertainJudge.trusting(SemanticJudge(EmbeddingCache(MiniLMEmbedder())))


def test_the_judge_sets_the_dev_pairs_as_the_case_needs(minilm: UncertainJudge) -> None:
    """The premise: the alias is the entry's lesson by closeness, the ADD is the alias's, and the ADD is about
    another scope than the entry's text (so the split of the alias does not apply: the alias is the entry's)."""
    minilm.prepare([FEES, BRIDGE, TAX])
    assert minilm.judge(BRIDGE, "general", FEES, "general").kind == "same"
    assert minilm.judge(TAX, "general", BRIDGE, "general").kind == "same"
    verdict = minilm.judge(TAX, "general", FEES, "general")
    assert verdict.kind == "distinct" and verdict.apart and verdict.reason.startswith("another scope")


def test_a_wording_of_another_scope_gets_its_own_entry_not_folded_through_an_alias(minilm: UncertainJudge) -> None:
    result = apply_operations(_playbook(FEES, [BRIDGE]), [_add(TAX)], 2, judge=minilm)
    kept = result.playbook.get(ENTRY)
    assert kept is not None and (kept.content, kept.aliases, kept.helpful) == (FEES, [BRIDGE], 3)
    [new] = [e for e in result.playbook.entries if e.entry_id != ENTRY]
    assert new.content == TAX
    [applied] = result.applied
    assert applied.outcome == "applied" and applied.entry_id == new.entry_id


def test_a_wording_the_entrys_text_only_misses_by_closeness_is_still_matched_through_an_alias() -> None:
    """Aliases still do their job: an ADD merely not close enough to the entry's text (not set apart) is folded
    through an alias it restates."""
    judge = TableJudge(same=[("entry text", "alias"), ("new", "alias")], apart=[])
    entry = PlaybookEntry(entry_id=ENTRY, section="general", content="entry text", helpful=3, created_version=1,
                          updated_version=1, aliases=["alias"])
    verdict = judge_aliases(judge, _add("new"), entry)
    assert verdict is not None and verdict.kind == "same" and not verdict.reinforces


class TableJudge:
    """Verdicts by table, symmetric: ``same`` pairs, ``apart`` pairs (distinct for a stated reason), else distinct
    by closeness."""

    def __init__(self, same: Sequence[tuple[str, str]], apart: Sequence[tuple[str, str]]) -> None:
        self.same = {frozenset(p) for p in same}
        self.apart = {frozenset(p) for p in apart}

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        pair = frozenset((new, old))
        if new == old or pair in self.same:
            return Judgement("same", 0.7, "same meaning (0.70)", reinforces=False)
        if pair in self.apart:
            return Judgement("distinct", 0.8, "another scope", apart=True)
        return Judgement("distinct", 0.1, "meaning 0.10 < 0.5")


@settings(max_examples=60, deadline=None)
@given(aliases=st.lists(st.sampled_from(["a1", "a2", "a3", "a4"]), unique=True, min_size=1),
       same_as_new=st.sets(st.sampled_from(["a1", "a2", "a3", "a4"])))
def test_an_add_set_apart_from_an_entrys_text_is_never_folded_into_it(aliases: list[str],
                                                                      same_as_new: set[str]) -> None:
    """Whatever aliases the entry holds and whichever of them the ADD restates, an ADD the judge sets apart from
    the entry's text never lands in that entry and never raises its counters."""
    judge = TableJudge(same=[("new", a) for a in same_as_new] + [("text", a) for a in aliases],
                       apart=[("new", "text")])
    result = apply_operations(_playbook("text", aliases), [_add("new")], 2, judge=judge)
    kept = result.playbook.get(ENTRY)
    assert kept is not None and kept.helpful == 3 and kept.aliases == aliases
    [applied] = result.applied
    assert applied.entry_id != ENTRY


LABELS = "For shipping labels, print the address in capital letters."
WEIGH = "Shipping labels: weigh the parcel before printing the label."  # another action, folded in as an alias
COURIER = "When a task involves courier parcels, weigh the package before printing."  # WEIGH's action


def test_the_judge_sets_the_action_pairs_as_the_case_needs(minilm: UncertainJudge) -> None:
    """The premise: the alias is the entry's lesson by closeness (so it is not split off), the ADD restates the
    alias and only misses the entry's text by closeness (nothing sets it apart), and the two actions alone differ."""
    minilm.prepare([LABELS, WEIGH, COURIER])
    assert minilm.judge(WEIGH, "general", LABELS, "general").kind == "same"
    assert minilm.judge(COURIER, "general", WEIGH, "general").kind == "same"
    verdict = minilm.judge(COURIER, "general", LABELS, "general")
    assert verdict.kind == "distinct" and not verdict.apart
    why = actions_differ(minilm, _add(COURIER), _entry(LABELS, [WEIGH]))
    assert why is not None and why.startswith("another action")


def test_another_action_under_a_close_scope_is_not_folded_through_an_alias(minilm: UncertainJudge) -> None:
    result = apply_operations(_playbook(LABELS, [WEIGH]), [_add(COURIER)], 2, judge=minilm)
    kept = result.playbook.get(ENTRY)
    assert kept is not None and (kept.content, kept.aliases, kept.helpful) == (LABELS, [WEIGH], 3)
    [new] = [e for e in result.playbook.entries if e.entry_id != ENTRY]
    assert new.content == COURIER


def test_the_action_test_says_nothing_when_a_text_states_no_scope() -> None:
    """Without a stated scope the action is the whole text, which the judge has read: aliases match as before."""
    judge = TableJudge(same=[("Weigh parcels before printing.", "alias")], apart=[])
    entry = _entry("For shipping labels, print the address in capital letters.", ["alias"])
    assert actions_differ(judge, _add("Weigh parcels before printing."), entry) is None
    assert judge_aliases(judge, _add("Weigh parcels before printing."), entry) is not None


def test_an_alias_carries_the_entrys_action_to_another_wording_of_its_scope() -> None:
    """Both scoped, the actions one by the judge: the ADD is matched through the alias it restates."""
    new, text = "For courier parcels, print the address in capitals.", "For shipping labels, print the address in caps."
    judge = TableJudge(same=[(new, "alias"), ("print the address in capitals.", "print the address in caps.")],
                       apart=[])
    assert judge_aliases(judge, _add(new), _entry(text, ["alias"])) is not None


def _entry(content: str, aliases: Sequence[str]) -> PlaybookEntry:
    return PlaybookEntry(entry_id=ENTRY, section="general", content=content, helpful=3, created_version=1,
                         updated_version=1, aliases=list(aliases))
