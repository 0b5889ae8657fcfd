"""ACE's playbook text format and seeded versions (no broker)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from combee_core.log_order import valid_versions
from combee_core.models import PlaybookVersion
from combee_core.playbook import Playbook
from combee_core.runs.ace_format import (
    ACE_SECTIONS,
    AceFormatError,
    ace_sections,
    parse_ace,
    render_ace,
    section_heading,
    section_slug,
)
from combee_core.runs.seed import is_import_manifest, seed_version

SAMPLE = Path(__file__).parents[1] / "data" / "ace_playbook.txt"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_headings_and_section_names_are_aces_slugs_both_ways():
    assert section_slug("STRATEGIES & INSIGHTS") == "strategies_and_insights"
    assert section_slug("PROBLEM-SOLVING HEURISTICS") == "problem-solving_heuristics"
    for heading in ACE_SECTIONS:
        assert section_heading(section_slug(heading)) == heading
    assert section_heading("debugging_tips") == "DEBUGGING TIPS"


def test_the_sample_survives_parse_seed_render_byte_for_byte():
    text = SAMPLE.read_text(encoding="utf-8")
    ace = parse_ace(text)
    assert ace.notes == []
    seeded = seed_version("fin", ace.entries(1), None, target_batch_size=40, now=NOW)
    assert render_ace(seeded.version.entries) == text
    by_id = {e.entry_id: e for e in seeded.version.entries}
    assert (by_id["cal-00002"].helpful, by_id["com-00007"].harmful) == (8, 2)
    assert by_id["con-00006"].section == "context_clues_and_indicators"


def test_other_layouts_keep_sections_ids_counters_and_contents_and_say_what_moves():
    text = ("# a comment\n[oth-00003] helpful=1 harmful=0 :: no heading yet\n"
            "## DEBUGGING TIPS\n[deb-00002] helpful=2 harmful=1 ::   spaced    out  \n\n\n"
            "## STRATEGIES & INSIGHTS\n[str-00009] helpful=0 harmful=0 :: later id first\n"
            "[str-00001] helpful=4 harmful=0 :: earlier id second\n")
    ace = parse_ace(text)
    assert any("comment" in note for note in ace.notes) and any("ACE's order" in note for note in ace.notes)
    entries = Playbook.from_entries("x", 1, ace.entries(1)).entries
    again = parse_ace(render_ace(entries))
    assert again.notes == []
    original = {(h, e.entry_id, e.helpful, e.harmful, e.content) for h, es in ace_sections(ace) for e in es}
    kept = {(h, e.entry_id, e.helpful, e.harmful, e.content) for h, es in ace_sections(again) for e in es}
    assert kept == original
    assert ("OTHERS", "oth-00003", 1, 0, "no heading yet") in kept
    assert ("DEBUGGING TIPS", "deb-00002", 2, 1, "spaced out") in kept


@pytest.mark.parametrize("text, message", [
    ("## OTHERS\nnot an entry\n", "line 2: not an ACE entry"),
    ("## OTHERS\n[a-1] helpful=0 harmful=0 :: x\n[a-1] helpful=0 harmful=0 :: y\n", "already used on line 2"),
    ("## ????\n", "line 1: section heading"),
])
def test_bad_text_is_refused_with_its_line(text, message):
    with pytest.raises(AceFormatError, match=message.replace("?", r"\?")):
        parse_ace(text)


def test_a_seeded_version_is_the_next_version_and_takes_the_batch_id():
    first = seed_version("fin", parse_ace(SAMPLE.read_text()).entries(1), None, target_batch_size=40, now=NOW)
    assert (first.version.version, first.version.parent_version, first.version.batch_id) == (1, 0, 0)
    assert first.manifest.batch_id == 0 and is_import_manifest(first.manifest)
    assert first.version.lineage == first.manifest.trace_ids == [first.import_id]
    assert {a.operation.op for a in first.version.operations} == {"ADD"}
    assert first.version.next_entry_number == 9  # one past the largest id counter (oth-00008)
    # round trip through the wire, accepted by the reading rule and by the reducer's rebuild
    wire = PlaybookVersion.from_json_bytes(first.version.to_json_bytes())
    assert valid_versions([wire]) == [wire]
    Playbook.from_entries("fin", wire.version, wire.entries, wire.next_entry_number)

    edited = [e.model_copy(update={"content": "Verify types first."}) if e.entry_id == "str-00001" else e
              for e in first.version.entries if e.entry_id != "oth-00008"]
    second = seed_version("fin", edited, first.version, target_batch_size=40, now=NOW)
    assert (second.version.version, second.version.batch_id, second.manifest.base_version) == (2, 1, 1)
    ops = sorted((a.operation.op, a.entry_id) for a in second.version.operations)
    assert ops == [("DELETE", "oth-00008"), ("UPDATE", "str-00001")]
    assert second.version.next_entry_number == 9  # the deleted id's counter is not handed out again
    unchanged = {e.entry_id: e for e in second.version.entries}["cal-00002"]
    assert (unchanged.created_version, unchanged.updated_version) == (1, 1)
    assert second.import_id != first.import_id
    assert seed_version("fin", edited, first.version, target_batch_size=40, now=NOW).import_id == second.import_id
