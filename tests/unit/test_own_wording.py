"""An entry's own wording never challenges it (issue 38; ``combee_core.playbook.challenges.own_wording``).

A wording the judge matches to an entry on closeness alone, unconfirmed, challenges the entry (it may be a reversal
the judge cannot see). But an ADD that restates the entry's own text or one of its aliases word for word is the
entry's lesson restated: before this, a lesson whose wordings were all "same" by closeness replaced itself in turn
(the winner kept the loser's text as an alias; that text restated opened a challenge against the winner and took the
slot back, and so on). It still joins a challenge already pending against the entry whose correction it restates (a
challenger folded in as an alias), so a correction restated across batches still supersedes."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from combee_core.models import AddOp, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.meaning import Judgement

LESSON = ["Check the units before you add two quantities.", "Make sure both quantities share a unit before summing.",
          "Convert values to one unit, then add them."]  # one lesson, three wordings
OTHER = "Quote every figure with its source."
TEXTS = [*LESSON, OTHER, "Round money to cents at the end.", "Sort dates newest first."]


class TableJudge:
    """Verdicts by table (symmetric): pair -> (kind, reinforces); the same text is the same lesson, for certain."""

    def __init__(self, table: dict[frozenset[str], tuple[str, bool]]) -> None:
        self.table = table

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if new == old:
            return Judgement("same", 1.0, "same text")
        kind, reinforces = self.table.get(frozenset((new, old)), ("distinct", True))
        score = 0.5 + (sum(map(ord, new + old)) % 40) / 100  # any fixed score per pair
        return Judgement(kind, score, f"{kind} by table", reinforces=reinforces)  # type: ignore[arg-type]


UNCONFIRMED = TableJudge({frozenset((a, b)): ("same", False) for a in LESSON for b in LESSON if a != b})


def _entry(content: str, aliases: Sequence[str] = (), entry_id: str = "gen-00001") -> PlaybookEntry:
    return PlaybookEntry(entry_id=entry_id, section="general", content=content, created_version=1, updated_version=1,
                         aliases=list(aliases))


def _versions(playbook: Playbook, texts: Sequence[str], judge: TableJudge) -> tuple[Playbook, list[str]]:
    reasons: list[str] = []
    for version, text in enumerate(texts, playbook.version + 1):
        result = apply_operations(playbook, [AddOp(section="general", content=text)], version, judge=judge)
        playbook = result.playbook
        reasons += [a.reason for a in (*result.applied, *result.superseded)]
    return playbook, reasons


def test_an_alias_restated_in_three_batches_neither_challenges_nor_supersedes_its_entry() -> None:
    playbook = Playbook.from_entries("pb", 1, [_entry(LESSON[0], [LESSON[1]])])
    playbook, reasons = _versions(playbook, [LESSON[1]] * 3, UNCONFIRMED)
    [entry] = playbook.entries
    assert (entry.entry_id, entry.content, entry.helpful, entry.aliases) == ("gen-00001", LESSON[0], 0, [LESSON[1]])
    assert playbook.challenges == ()
    assert all("restates gen-00001's own wording" in reason for reason in reasons)


def test_a_lesson_with_three_wordings_takes_its_own_slot_once_and_then_holds_it() -> None:
    playbook = Playbook.from_entries("pb", 1, [_entry(LESSON[0])])
    playbook, _ = _versions(playbook, [LESSON[1], LESSON[1]], UNCONFIRMED)  # a new wording: a challenge, it wins
    [winner] = playbook.entries
    assert (winner.content, winner.aliases) == (LESSON[1], [LESSON[0]])
    playbook, _ = _versions(playbook, [LESSON[0], LESSON[1], LESSON[0], LESSON[0], LESSON[1], LESSON[0]], UNCONFIRMED)
    assert [(e.entry_id, e.content) for e in playbook.entries] == [(winner.entry_id, LESSON[1])]
    assert playbook.challenges == ()


def test_a_challenger_folded_in_as_an_alias_still_adds_to_its_own_challenge() -> None:
    playbook = Playbook.from_entries("pb", 1, [_entry(LESSON[0])])
    playbook, _ = _versions(playbook, [LESSON[1]], UNCONFIRMED)
    assert playbook.entries[0].aliases == [LESSON[1]] and playbook.challenges[0].support == 1
    playbook, reasons = _versions(playbook, [LESSON[1]], UNCONFIRMED)  # an alias now, and the challenge's wording
    assert [e.content for e in playbook.entries] == [LESSON[1]] and "supersedes gen-00001" in reasons[0]


KINDS = st.sampled_from([("same", False), ("same", True), ("conflict", True), ("distinct", True)])


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Playbook, TableJudge, list[str]]:
    pairs = [frozenset((a, b)) for n, a in enumerate(TEXTS) for b in TEXTS[n + 1:]]
    judge = TableJudge({pair: draw(KINDS) for pair in pairs})
    texts = draw(st.permutations(TEXTS))
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    entries, start = [], 0
    for number, size in enumerate(sizes, 1):
        if start + size > len(texts):
            break
        held = texts[start:start + size]
        entries.append(_entry(held[0], held[1:], f"gen-{number:05d}"))
        start += size
    wordings = [w for e in entries for w in (e.content, *e.aliases)]
    adds = draw(st.lists(st.sampled_from(wordings), min_size=1, max_size=6))
    return Playbook.from_entries("pb", 1, entries), judge, adds


@settings(max_examples=150, deadline=None)
@given(_cases())
def test_an_add_restating_an_entrys_own_wording_never_opens_a_challenge_against_it(
        case: tuple[Playbook, TableJudge, list[str]]) -> None:
    playbook, judge, adds = case
    for version, text in enumerate(adds, 2):
        owners = {e.entry_id for e in playbook.entries if text in (e.content, *e.aliases)}
        pending = {(c.entry_id, c.content) for c in playbook.challenges}
        result = apply_operations(playbook, [AddOp(section="general", content=text)], version, judge=judge)
        for challenge in result.playbook.challenges:
            assert challenge.entry_id not in owners or (challenge.entry_id, challenge.content) in pending
        for delete in result.superseded:
            if delete.entry_id in owners and "this ADD's challenge" in delete.reason:
                assert any(entry_id == delete.entry_id for entry_id, _ in pending)  # a challenge pending before
        playbook = result.playbook
