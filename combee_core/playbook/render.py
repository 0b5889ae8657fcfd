"""The playbook as prompt text: one line per entry under section headers, within a token budget (the most useful
entries first), and the token estimate used throughout Combee."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from combee_core.models import PlaybookEntry
from combee_core.playbook.value import Playbook, entry_value


def estimate_tokens(text: str) -> int:
    """Token estimate used throughout Combee: ``ceil(len(text) / 4)`` characters-per-token.

    No tokenizer dependency and stable across models; about right for English with GPT-style tokenizers.
    """
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, slots=True)
class RenderedPlaybook:
    """Prompt text of a playbook, its token estimate, and which entries made it in (both in playbook order)."""

    text: str
    tokens: int
    included_entry_ids: tuple[str, ...]
    omitted_entry_ids: tuple[str, ...]


def section_header(section: str) -> str:
    """The header line of a section."""
    return f"## {section}"


def render_entry(entry: PlaybookEntry) -> str:
    """One line: ``[id] helpful=X harmful=Y :: content`` (whitespace in content collapsed to keep one line)."""
    content = " ".join(entry.content.split())
    return f"[{entry.entry_id}] helpful={entry.helpful} harmful={entry.harmful} :: {content}"


def _render_text(entries: Sequence[PlaybookEntry]) -> str:
    """Sections in order, each a header then its entry lines, separated by a blank line."""
    blocks: list[str] = []
    section: str | None = None
    lines: list[str] = []
    for entry in entries:
        if entry.section != section:
            if lines:
                blocks.append("\n".join(lines))
            section, lines = entry.section, [section_header(entry.section)]
        lines.append(render_entry(entry))
    if lines:
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def render_entries(entries: Sequence[PlaybookEntry]) -> str:
    """Entries in the order given, as the prompt text :func:`render_playbook` makes of them (no budget)."""
    return _render_text(entries)


def render_playbook(playbook: Playbook, token_budget: int | None = None) -> RenderedPlaybook:
    """Render the playbook as prompt text, within ``token_budget`` (:func:`estimate_tokens`) when given.

    Over budget, entries are taken in order of ``helpful - harmful`` (desc), then playbook order, and the
    selection stops at the first entry that does not fit: an entry is never included while a more valuable
    one is left out. The chosen entries are rendered in playbook order; the rest are listed as omitted.
    """
    if token_budget is not None and token_budget < 0:
        raise ValueError(f"token_budget must be >= 0, got {token_budget}")
    full = _render_text(playbook.entries)
    if token_budget is None or estimate_tokens(full) <= token_budget:
        return RenderedPlaybook(full, estimate_tokens(full), playbook.entry_ids, ())
    return render_in_priority(playbook, sorted(playbook.entries, key=entry_value), token_budget)


def render_in_priority(playbook: Playbook, priority: Sequence[PlaybookEntry], token_budget: int | None
                       ) -> RenderedPlaybook:
    """Render the entries of ``priority`` (a subset of ``playbook``, most wanted first) within ``token_budget``:
    taken in that order until the first that does not fit, rendered in playbook order; every other entry of the
    playbook is listed as omitted."""
    max_chars = token_budget * 4 if token_budget is not None else math.inf
    chosen: dict[str, None] = {}
    sections: dict[str, None] = {}
    length = 0
    for entry in priority:
        line = len(render_entry(entry))
        if entry.section in sections:
            extra = line + 1  # "\n" + line
        else:
            header = len(section_header(entry.section)) + 1 + line  # header "\n" line
            extra = header + (2 if sections else 0)  # "\n\n" between sections
        if length + extra > max_chars:
            break
        length += extra
        chosen[entry.entry_id] = None
        sections[entry.section] = None
    included = [e for e in playbook.entries if e.entry_id in chosen]
    text = _render_text(included)
    return RenderedPlaybook(
        text=text,
        tokens=estimate_tokens(text),
        included_entry_ids=tuple(e.entry_id for e in included),
        omitted_entry_ids=tuple(e.entry_id for e in playbook.entries if e.entry_id not in chosen),
    )


def playbook_tokens(playbook: Playbook) -> int:
    """Token estimate of the whole rendered playbook."""
    return render_playbook(playbook).tokens
