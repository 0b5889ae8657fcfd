"""ACE's playbook text format: ``## SECTION`` headings, then ``[id] helpful=X harmful=Y :: content`` lines.

ACE (Agentic Context Engineering) keeps its playbook as plain text. Its seven standard sections (:data:`ACE_SECTIONS`)
are always present in an ACE playbook, in that order, even when empty. A section's Combee name is ACE's own slug of
the heading (lower case, spaces to ``_``, ``&`` to ``and``: ``STRATEGIES & INSIGHTS`` -> ``strategies_and_insights``),
and a Combee section is written back as the reverse (``problem-solving_heuristics`` -> ``PROBLEM-SOLVING HEURISTICS``).

:func:`render_ace` writes ACE's seven sections first, in ACE's order, then any other section in playbook order, each
a heading followed by its entries (in playbook order: by id counter), sections separated by one blank line. So a
playbook written that way survives ``parse_ace`` -> Combee -> ``render_ace`` byte for byte; for any other layout the
sections, ids, counters and contents survive, and :attr:`AcePlaybook.notes` says what will not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from combee_core import limits
from combee_core.errors import CombeeError
from combee_core.models import PlaybookEntry

ACE_SECTIONS = (
    "STRATEGIES & INSIGHTS",
    "FORMULAS & CALCULATIONS",
    "CODE SNIPPETS & TEMPLATES",
    "COMMON MISTAKES TO AVOID",
    "PROBLEM-SOLVING HEURISTICS",
    "CONTEXT CLUES & INDICATORS",
    "OTHERS",
)
"""ACE's standard sections, in the order of its empty playbook."""

_LINE = re.compile(r"^\[([^\]]+)\]\s*helpful=(\d+)\s*harmful=(\d+)\s*::\s*(.*)$")
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class AceFormatError(CombeeError, ValueError):
    """Text that is not an ACE playbook; the message names the line."""


def section_slug(heading: str) -> str:
    """ACE's slug of a heading, which is the Combee section name (``COMMON MISTAKES TO AVOID`` ->
    ``common_mistakes_to_avoid``)."""
    return heading.strip().lower().replace(" ", "_").replace("&", "and")


def section_heading(section: str) -> str:
    """The ACE heading of a Combee section (the reverse of :func:`section_slug` for ACE-style headings)."""
    for heading in ACE_SECTIONS:
        if section_slug(heading) == section:
            return heading
    return section.upper().replace("_and_", " & ").replace("_", " ")


@dataclass(frozen=True)
class AceEntry:
    entry_id: str
    helpful: int
    harmful: int
    content: str


@dataclass
class AceSection:
    heading: str
    entries: list[AceEntry] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return section_slug(self.heading)


@dataclass
class AcePlaybook:
    """A parsed ACE playbook: its sections in file order, and what a round trip through Combee will not keep."""

    sections: list[AceSection]
    notes: list[str] = field(default_factory=list)

    def entries(self, version: int) -> list[PlaybookEntry]:
        """Combee entries (created and updated at ``version``); raises :class:`AceFormatError` for an id, section or
        content Combee cannot hold."""
        result: list[PlaybookEntry] = []
        for section in self.sections:
            for entry in section.entries:
                try:
                    result.append(PlaybookEntry(entry_id=entry.entry_id, section=section.slug, content=entry.content,
                                                helpful=entry.helpful, harmful=entry.harmful,
                                                created_version=version, updated_version=version))
                except ValidationError as error:
                    problem = error.errors()[0]
                    raise AceFormatError(f"entry [{entry.entry_id}] in ## {section.heading}: "
                                         f"{problem['loc'][0]}: {problem['msg']}") from error
        return result


def parse_ace(text: str) -> AcePlaybook:
    """Parse ACE playbook text. Blank lines are layout; a ``#`` line that is not a ``## `` heading is a comment
    (ACE skips it too, and it is not kept). Entries before any heading go to ``OTHERS``, as ACE's curator does.
    Raises :class:`AceFormatError` naming the first line Combee cannot take."""
    from combee_core.playbook import Playbook, PlaybookError

    playbook = _parse(text)
    try:
        ordered = Playbook.from_entries("ace", 1, playbook.entries(1)).entries
    except PlaybookError as error:
        raise AceFormatError(str(error)) from error
    if ace_sections(_parse(render_ace(ordered))) != ace_sections(playbook):
        playbook.notes.append("this file is not in ACE's order, so `combee playbook export --format ace` will list "
                              "ACE's seven sections first, then the others, and a section's entries by id number "
                              "(ids, counters and contents are kept)")
    return playbook


def _parse(text: str) -> AcePlaybook:
    sections: dict[str, AceSection] = {}
    notes: list[str] = []
    current: AceSection | None = None
    seen_ids: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("## "):
            heading = line[3:].strip()
            slug = section_slug(heading)
            if not _SLUG.match(slug) or len(slug) > limits.MAX_SECTION_CHARS:
                raise AceFormatError(f"line {number}: section heading {heading!r} has no usable name (letters, "
                                     f"digits, spaces, '&', '-' and '_'; at most {limits.MAX_SECTION_CHARS} "
                                     f"characters)")
            if slug in sections and sections[slug].heading != heading:
                raise AceFormatError(f"line {number}: ## {heading} is the same section as "
                                     f"## {sections[slug].heading}")
            if section_heading(slug) != heading:
                notes.append(f"## {heading} is written back as ## {section_heading(slug)}")
            current = sections.setdefault(slug, AceSection(heading))
            continue
        if line.startswith("#"):
            notes.append(f"line {number}: comment {line[:40]!r} is not kept")
            continue
        match = _LINE.match(line)
        if match is None:
            raise AceFormatError(f"line {number}: not an ACE entry ([id] helpful=X harmful=Y :: content): "
                                 f"{line[:80]!r}")
        entry_id, helpful, harmful, content = match.groups()
        if entry_id in seen_ids:
            raise AceFormatError(f"line {number}: entry id [{entry_id}] is already used on line {seen_ids[entry_id]}")
        seen_ids[entry_id] = number
        if not content.strip():
            raise AceFormatError(f"line {number}: entry [{entry_id}] has no content")
        if current is None:
            current = sections.setdefault(section_slug("OTHERS"), AceSection("OTHERS"))
        current.entries.append(AceEntry(entry_id, int(helpful), int(harmful), " ".join(content.split())))
    return AcePlaybook(list(sections.values()), notes)


def render_ace(entries: Iterable[PlaybookEntry]) -> str:
    """ACE text of a playbook's entries (given in playbook order): ACE's seven sections (empty ones too), then the
    others, each heading followed by its entries, one blank line between sections, a final newline."""
    by_section: dict[str, list[PlaybookEntry]] = {}
    for entry in entries:
        by_section.setdefault(entry.section, []).append(entry)
    order: list[str] = [section_slug(h) for h in ACE_SECTIONS]
    order += [s for s in by_section if s not in order]
    blocks = []
    for section in order:
        lines = [f"## {section_heading(section)}"]
        lines += [format_ace_line(e.entry_id, e.helpful, e.harmful, e.content) for e in by_section.get(section, [])]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def format_ace_line(entry_id: str, helpful: int, harmful: int, content: str) -> str:
    """One ACE line (whitespace in the content collapsed, as ACE keeps one line per entry)."""
    return f"[{entry_id}] helpful={helpful} harmful={harmful} :: {' '.join(content.split())}"


def ace_sections(playbook: AcePlaybook) -> list[tuple[str, list[AceEntry]]]:
    """Sections (heading, entries) with at least one entry or one of ACE's own: what a round trip keeps."""
    return [(s.heading, list(s.entries)) for s in playbook.sections if s.entries or s.heading in ACE_SECTIONS]
