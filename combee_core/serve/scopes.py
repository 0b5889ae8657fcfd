"""Scopes (no Kafka): a playbook may name a parent; its agents are served its own entries, then the parent's (and the
grandparent's...), within one token budget.

Learning stays per playbook: traces are keyed by ``playbook_id``, so a child's traces only ever enter the child's
batches and lineages; only *serving* composes. The child's entries come first because they were learned from the
child's own traces (specific beats general, as in any inheritance of configuration): when the budget cannot hold
both, the parent's are the ones left out, least valuable first. Within each scope the order is
:func:`~combee_core.playbook.render.render_playbook`'s (most valuable first). An entry is named ``scope/entry_id``
in the composed view, so a parent's ``str-00001`` and the child's never collide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from combee_core.errors import CombeeError
from combee_core.models import PlaybookEntry
from combee_core.playbook import Playbook, make_entry_id, normalise_text, render_entry, section_header
from combee_core.playbook.render import estimate_tokens
from combee_core.playbook.value import entry_value

_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class ScopeError(CombeeError, ValueError):
    """The parents setting cannot be used (bad pair, a playbook naming two parents, a cycle)."""


def parse_parents(text: str) -> dict[str, str]:
    """``child=parent`` pairs, comma-separated, as a mapping; raises :class:`ScopeError` for a malformed pair, a
    child named twice, a playbook its own parent or a cycle."""
    import re

    parents: dict[str, str] = {}
    for pair in (part.strip() for part in text.split(",")):
        if not pair:
            continue
        child, sep, parent = (side.strip() for side in pair.partition("="))
        if not sep or not re.match(_ID, child) or not re.match(_ID, parent):
            raise ScopeError(f"playbook parents: {pair!r} is not child=parent (playbook ids)")
        if child in parents:
            raise ScopeError(f"playbook parents: {child} names two parents ({parents[child]}, {parent})")
        parents[child] = parent
    for child in parents:
        scope_chain(child, parents)
    return parents


def scope_chain(playbook_id: str, parents: Mapping[str, str]) -> tuple[str, ...]:
    """The playbook then its ancestors, nearest first; raises :class:`ScopeError` on a cycle."""
    chain = [playbook_id]
    while chain[-1] in parents:
        parent = parents[chain[-1]]
        if parent in chain:
            raise ScopeError(f"playbook parents: a cycle {' -> '.join([*chain, parent])}")
        chain.append(parent)
    return tuple(chain)


@dataclass(frozen=True)
class ScopedEntry:
    """An entry of the composed view and the playbook (scope) it belongs to."""

    scope: str
    entry: PlaybookEntry

    @property
    def qualified_id(self) -> str:
        return f"{self.scope}/{self.entry.entry_id}"


@dataclass(frozen=True)
class ServedView:
    """What an agent of ``playbook_id`` is served: the chosen entries (own first, then each ancestor's, each in
    playbook order), the prompt text, its token estimate, and the qualified ids left out for the budget."""

    playbook_id: str
    scopes: tuple[str, ...]
    entries: tuple[ScopedEntry, ...]
    text: str
    tokens: int
    omitted: tuple[str, ...]
    shadowed: tuple[str, ...] = ()
    """Qualified ids of ancestors' entries not repeated: a nearer scope holds the same text (a lifted lesson)."""


def _inherited(scope: str) -> str:
    return f"# inherited from playbook {scope}"


def _line(scope: str, entry: PlaybookEntry) -> str:
    return render_entry(entry.model_copy(update={"entry_id": f"{scope}/{entry.entry_id}"}))


def compose_view(chain: Sequence[tuple[str, Sequence[PlaybookEntry]]], token_budget: int | None = None) -> ServedView:
    """Compose the served view of ``chain[0]`` from ``(playbook_id, served entries)`` of it and its ancestors,
    nearest first (:func:`scope_chain` order). Within ``token_budget`` (``ceil(chars / 4)`` of the text), entries
    are taken scope by scope, each scope's most valuable first, stopping at the first that does not fit."""
    if not chain:
        raise ScopeError("a served view needs at least the playbook itself")
    if token_budget is not None and token_budget < 0:
        raise ValueError(f"token_budget must be >= 0, got {token_budget}")
    max_chars = token_budget * 4 if token_budget is not None else None
    ordered = [(scope, Playbook.from_entries(scope, 0, entries).entries) for scope, entries in chain]
    kept: set[tuple[str, str]] = set()
    sections: set[tuple[str, str]] = set()
    blocks: set[str] = set()
    omitted: list[str] = []
    shadowed: list[str] = []
    nearer: set[str] = set()
    length, full = 0, False
    for index, (scope, entries) in enumerate(ordered):
        texts = {normalise_text(entry.content) for entry in entries}
        for entry in sorted(entries, key=entry_value):
            if normalise_text(entry.content) in nearer:
                shadowed.append(f"{scope}/{entry.entry_id}")
                continue
            extra = len(_line(scope, entry)) + 1
            if (scope, entry.section) not in sections:
                extra += len(section_header(entry.section)) + 1
            if scope not in blocks:
                extra += (len(_inherited(scope)) + 1 if index else 0) + (2 if blocks else 0) - 1
            if full or (max_chars is not None and length + extra > max_chars):
                full = True
                omitted.append(f"{scope}/{entry.entry_id}")
                continue
            length += extra
            kept.add((scope, entry.entry_id))
            sections.add((scope, entry.section))
            blocks.add(scope)
        nearer |= texts
    chosen = tuple(ScopedEntry(scope, entry) for scope, entries in ordered for entry in entries
                   if (scope, entry.entry_id) in kept)
    text = render_view(chain[0][0], chosen)
    return ServedView(chain[0][0], tuple(scope for scope, _ in chain), chosen, text, estimate_tokens(text),
                      tuple(omitted), tuple(shadowed))


def render_view(playbook_id: str, entries: Sequence[ScopedEntry]) -> str:
    """The prompt text of a composed view: the playbook's own sections, then each ancestor's under a
    ``# inherited from playbook <id>`` line; entries named ``scope/entry_id``."""
    blocks: dict[str, list[str]] = {}
    section: dict[str, str] = {}
    for item in entries:
        lines = blocks.setdefault(item.scope, [] if item.scope == playbook_id else [_inherited(item.scope)])
        if section.get(item.scope) != item.entry.section:
            section[item.scope] = item.entry.section
            lines.append(section_header(item.entry.section))
        lines.append(_line(item.scope, item.entry))
    return "\n\n".join("\n".join(lines) for lines in blocks.values())


def served_view(playbook_id: str, served: Mapping[str, Sequence[PlaybookEntry]], parents: Mapping[str, str],
                token_budget: int | None = None) -> ServedView:
    """The view an agent of ``playbook_id`` is served: its chain (:func:`scope_chain`) composed from ``served``
    (playbook id -> the entries of the version it serves: the promoted one, else the latest; a playbook with no
    version yet has none)."""
    return compose_view([(scope, served.get(scope, ())) for scope in scope_chain(playbook_id, parents)],
                        token_budget)


def lift_entries(child: Sequence[PlaybookEntry], entry_ids: Sequence[str], parent: Sequence[PlaybookEntry],
                 next_entry_number: int, version: int) -> list[PlaybookEntry]:
    """The parent's next entries with copies of the chosen child entries: new ids from the parent's counter
    (``next_entry_number``), made in ``version``, counters reset (the child's evidence is not the parent's). An entry
    whose text the parent already holds is not copied again; raises :class:`ScopeError` for an id the child lacks."""
    by_id = {entry.entry_id: entry for entry in child}
    missing = [entry_id for entry_id in entry_ids if entry_id not in by_id]
    if missing:
        raise ScopeError(f"the child playbook has no entry {', '.join(missing)}")
    held = {normalise_text(entry.content) for entry in parent}
    lifted = list(parent)
    for entry_id in dict.fromkeys(entry_ids):
        entry = by_id[entry_id]
        if normalise_text(entry.content) in held:
            continue
        held.add(normalise_text(entry.content))
        lifted.append(PlaybookEntry(entry_id=make_entry_id(entry.section, next_entry_number), section=entry.section,
                                    content=entry.content, created_version=version, updated_version=version))
        next_entry_number += 1
    return lifted


def split_used(playbook_id: str, entry_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """An agent's ``used_entries`` of ``playbook_id``: (its own entries' ids, bare: ``str-00001`` and
    ``<playbook_id>/str-00001`` alike; the inherited ones, ``scope/entry_id`` of another scope). A playbook learns
    only from its own entries' use: the inherited ids are for the caller to say it does not learn from them."""
    own: list[str] = []
    inherited: list[str] = []
    for entry_id in entry_ids:
        scope, sep, bare = entry_id.partition("/")
        if not sep:
            own.append(entry_id)
        elif scope == playbook_id:
            own.append(bare)
        else:
            inherited.append(entry_id)
    return list(dict.fromkeys(own)), list(dict.fromkeys(inherited))


def own_entry_id(playbook_id: str, entry_id: str) -> str | None:
    """``entry_id`` as ``playbook_id``'s own id (bare), or None when it names another scope's entry."""
    own, _ = split_used(playbook_id, [entry_id])
    return own[0] if own else None
