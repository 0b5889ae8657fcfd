"""An alias keeps its own identity until evidence merges it (``combee_core.playbook.aliases.split_alias``): a wording
of another lesson folded into an entry on closeness alone is split off as an entry of its own when a later ADD,
distinct from the entry's text and from its wordings together, restates it; a lesson is not lost into another
lesson's entry. The real-judge cases are the tuning set's (``bench/data/lessons_tuning.json``, seed 2 of
``python -m bench.naive_pipeline --sets lessons_tuning``), never a held-out set's."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from combee_core.models import AddOp, Challenge, PlaybookEntry
from combee_core.playbook import Playbook, apply_operations
from combee_core.playbook.embedding import EmbeddingCache
from combee_core.playbook.meaning import Judgement, SemanticJudge
from combee_core.playbook.onnx_embedding import MiniLMEmbedder
from combee_core.playbook.uncertain import UncertainJudge

ENTRY = "gen-00001"
PIN = "Builds must be reproducible, so commit a lock file with exact versions of every dependency."
PIN_ALIASES = ["Record the precise version of each library the project installs, not a range.",
               "Do not leave dependency versions floating; lock them to exact releases.",
               "Use a lock file so every install resolves the same package versions."]
SECRET_ALIAS = "Never commit secrets to the repository; load them from the environment."
SECRET_ADD = "Credentials belong in environment variables or a secret store, not in the source code."
PIN_ADD = "Pin exact dependency versions in the lock file for reproducible builds."


def _playbook(content: str, aliases: Sequence[str], challenges: Sequence[Challenge] = ()) -> Playbook:
    entry = PlaybookEntry(entry_id=ENTRY, section="general", content=content, helpful=3, created_version=1,
                          updated_version=1, aliases=list(aliases))
    return Playbook.from_entries("pb", 1, [entry], challenges=tuple(challenges))


def _add(text: str) -> AddOp:
    return AddOp(section="general", content=text)


@pytest.fixture(scope="module")
def minilm() -> UncertainJudge:
    """The naive pipeline's judge after a silent reducer call: MiniLM's verdicts stand, unconfirmed."""
    return UncertainJudge.trusting(SemanticJudge(EmbeddingCache(MiniLMEmbedder())))


def test_a_lesson_folded_into_another_lessons_entry_gets_its_own_entry_when_restated(minilm: UncertainJudge) -> None:
    playbook = _playbook(PIN, [*PIN_ALIASES, SECRET_ALIAS])
    result = apply_operations(playbook, [_add(SECRET_ADD)], 2, judge=minilm)
    kept = result.playbook.get(ENTRY)
    assert kept is not None and kept.content == PIN and kept.aliases == PIN_ALIASES  # the alias is out of it
    assert (kept.helpful, kept.harmful) == (3, 0)  # no counter rises on either side
    [split] = [e for e in result.playbook.entries if e.entry_id != ENTRY]
    assert (split.content, split.aliases, split.helpful) == (SECRET_ALIAS, [SECRET_ADD], 0)
    [applied] = result.applied
    assert applied.outcome == "applied" and applied.entry_id == split.entry_id
    assert applied.reason.startswith(f"alias {SECRET_ALIAS!r} of {ENTRY} split off as {split.entry_id}")
    assert result.changed == ()  # the entry's text is unchanged: nothing counts against the change cap


def test_a_wording_of_the_entrys_own_lesson_is_folded_not_split(minilm: UncertainJudge) -> None:
    playbook = _playbook(PIN, [*PIN_ALIASES, SECRET_ALIAS])
    result = apply_operations(playbook, [_add(PIN_ADD)], 2, judge=minilm)
    [entry] = result.playbook.entries
    assert entry.aliases[:3] == PIN_ALIASES and SECRET_ALIAS in entry.aliases


REGION = ["Store every backup copy in a second region, away from the primary data.",
          "Keep backup copies in another region than the database they protect.",
          "A backup kept in the same region as the database is lost with it; copy backups to a second region."]
RESTORE = ("Restore a backup into a scratch database every month to prove the backup copies in the database actually "
           "work.")
REHEARSE = "Backups nobody has restored are untested; rehearse a full restore from the backup copies regularly."


def test_an_alias_near_the_entrys_wordings_is_split_off_when_its_lesson_and_theirs_are_two(
        minilm: UncertainJudge) -> None:
    """The restore-test alias is just close enough to the backup-region wordings' prototype (both about backups) for
    the single-alias test to keep it; the judge comparing lessons calls the ADD with it one lesson and the region
    wordings another, both ways: it is split off with the ADD, no counter raised (this test's own wordings)."""
    playbook = _playbook(REGION[0], [REGION[1], RESTORE, REGION[2]])
    result = apply_operations(playbook, [_add(REHEARSE)], 2, judge=minilm)
    kept = result.playbook.get(ENTRY)
    assert kept is not None and (kept.content, kept.aliases, kept.helpful) == (REGION[0], REGION[1:], 3)
    [split] = [e for e in result.playbook.entries if e.entry_id != ENTRY]
    assert (split.content, split.aliases, split.helpful) == (RESTORE, [REHEARSE], 0)
    assert result.applied[0].reason.startswith(f"alias {RESTORE!r} of {ENTRY} split off as {split.entry_id}")


class GroupStub:
    """Pair verdicts by table (symmetric, all "same" unconfirmed once wrapped), and the lesson of a group of wordings
    by table: ``judge_group`` says "same" for the texts in ``members`` (the lesson the entry's wordings state)."""

    def __init__(self, same: Sequence[tuple[str, str]], members: Sequence[str], leaning: bool = False) -> None:
        self.same = {frozenset(p) for p in same}
        self.members = set(members)
        self.leaning = leaning
        """A prototype that holds ALIAS is the lesson of LATER too (the alias pulls the mean towards itself)."""

    def prepare(self, texts: Sequence[str]) -> None:
        return None

    def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
        if new == old or frozenset((new, old)) in self.same:
            return Judgement("same", 0.7, "same meaning (0.70)")
        return Judgement("distinct", 0.1, "meaning 0.10 < 0.5")

    def judge_group(self, new: str, new_section: str, texts: Sequence[str]) -> Judgement:
        if new in self.members or (self.leaning and new == LATER and ALIAS in texts):
            return Judgement("same", 0.6, "same meaning as the prototype")
        return Judgement("distinct", 0.2, "meaning 0.20 < 0.5 to the prototype")


RULE, OWN_1, OWN_2 = "rule A", "rule A reworded", "rule A put another way"
ALIAS, LATER = "lesson B folded by closeness", "lesson B restated"


def _stub(members: Sequence[str], *same: tuple[str, str], leaning: bool = False) -> UncertainJudge:
    pairs = [(RULE, OWN_1), (RULE, OWN_2), (RULE, ALIAS), (ALIAS, LATER), *same]
    return UncertainJudge.trusting(GroupStub(pairs, members, leaning))  # type: ignore[arg-type]


def test_the_add_is_weighed_against_the_entrys_other_wordings_not_a_prototype_holding_the_alias() -> None:
    playbook = _playbook(RULE, [OWN_1, ALIAS, OWN_2])
    result = apply_operations(playbook, [_add(LATER)], 2, judge=_stub([RULE, OWN_1, OWN_2], leaning=True))
    assert sorted(e.content for e in result.playbook.entries) == [ALIAS, RULE]


def test_the_split_ends_the_aliass_pending_challenge_and_replays_alike() -> None:
    challenge = Challenge(entry_id=ENTRY, entry_content=RULE, section="general", content=ALIAS, support=1,
                          first_version=1, last_version=1)
    playbook = _playbook(RULE, [OWN_1, ALIAS, OWN_2], [challenge])
    judge = _stub([RULE, OWN_1, OWN_2])
    first = apply_operations(playbook, [_add(LATER)], 2, judge=judge)
    assert sorted(e.content for e in first.playbook.entries) == [ALIAS, RULE]
    assert first.playbook.get(ENTRY).aliases == [OWN_1, OWN_2]  # type: ignore[union-attr]
    assert first.playbook.challenges == ()  # a lesson apart does not challenge the entry's text
    again = apply_operations(playbook, [_add(LATER)], 2, judge=judge)
    assert [e.model_dump_json() for e in again.playbook.entries] == [
        e.model_dump_json() for e in first.playbook.entries]


def test_no_split_when_the_add_states_the_lesson_of_the_entrys_wordings_together() -> None:
    playbook = _playbook(RULE, [OWN_1, ALIAS, OWN_2])
    result = apply_operations(playbook, [_add(LATER)], 2, judge=_stub([RULE, OWN_1, OWN_2, LATER]))
    [entry] = result.playbook.entries
    assert entry.aliases == [OWN_1, ALIAS, OWN_2] and "folded into" in result.applied[0].reason


def test_no_split_when_the_alias_states_the_lesson_of_the_entrys_other_wordings() -> None:
    playbook = _playbook(RULE, [OWN_1, ALIAS, OWN_2])
    result = apply_operations(playbook, [_add(LATER)], 2, judge=_stub([RULE, OWN_1, OWN_2, ALIAS]))
    assert [e.content for e in result.playbook.entries] == [RULE]


def test_a_judge_that_compares_pairs_only_splits_nothing() -> None:
    class PairsOnly:
        def __init__(self) -> None:
            self.table = GroupStub([(RULE, ALIAS), (ALIAS, LATER)], [RULE])

        def prepare(self, texts: Sequence[str]) -> None:
            return None

        def judge(self, new: str, new_section: str, old: str, old_section: str) -> Judgement:
            return self.table.judge(new, new_section, old, old_section)

    judge = UncertainJudge.trusting(PairsOnly())
    result = apply_operations(_playbook(RULE, [ALIAS, OWN_1]), [_add(LATER)], 2, judge=judge)
    assert [e.content for e in result.playbook.entries] == [RULE]
