"""Serving a child's composed view (no Kafka, no HTTP): what ``combee serve`` answers for a playbook with parents.

A playbook's *chain* is it and its ancestors (:func:`combee_core.serve.scopes.scope_chain`), each with the version it
serves (None: none yet). A chain of one is served exactly as before (``combee_core.serve.serving``): these functions are
only used for a playbook with a parent. The composed view is :func:`combee_core.serve.scopes.compose_view` within the
playbook token budget; its entity tag covers every scope's served version (a new version of an ancestor is a new
tag for each of its descendants); the context for a task ranks the composed entries; and a version newly served
for one playbook wakes its descendants' listeners too (:func:`affected`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from pydantic import Field

from combee_core.models import PlaybookEntry, PlaybookVersion
from combee_core.playbook import Playbook
from combee_core.playbook.embedding import Embedder
from combee_core.playbook.render import estimate_tokens
from combee_core.playbook.retrieval import RetrievalIndex
from combee_core.playbook.value import entry_value
from combee_core.serve.scopes import ServedView, compose_view, render_view, scope_chain
from combee_core.serve.serving import NOTHING_SERVED_ETAG, ContextQuery, ServeModel, TaskContext, etag

Chain = Sequence[tuple[str, PlaybookVersion | None]]
"""A playbook then its ancestors, nearest first, each with its served version (None: none yet)."""


def chain_etag(chain: Chain, token_budget: int | None) -> str:
    """The entity tag of what a chain serves: a chain of one is :func:`combee_core.serve.serving.etag` of its version
    (as without scopes); a longer one is ``"<v>.<v>...-<hash>"``, each scope's version number, nearest first, and 20 hex
    digits of a hash over every scope's tag and the budget, so any scope's newly served version (or a rollback) is
    a new tag. ``"0"`` while no scope serves anything."""
    if len(chain) == 1:
        return etag(chain[0][1])
    if all(version is None for _, version in chain):
        return NOTHING_SERVED_ETAG
    key = "\n".join([*(f"{scope} {etag(version)}" for scope, version in chain), f"budget {token_budget}"])
    numbers = ".".join(str(version.version if version else 0) for _, version in chain)
    return f'"{numbers}-{hashlib.sha256(key.encode()).hexdigest()[:20]}"'


def affected(playbook_id: str, parents: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """The playbooks whose served view changes when ``playbook_id``'s served version does: it, then every playbook
    (of ``known`` and the children ``parents`` names) that has it as an ancestor, sorted."""
    candidates = set(known) | set(parents)
    return [playbook_id, *sorted(p for p in candidates - {playbook_id} if playbook_id in scope_chain(p, parents))]


def view_of(chain: Chain, token_budget: int | None) -> ServedView:
    """The composed view of ``chain[0]`` (:func:`combee_core.serve.scopes.compose_view` of the served entries)."""
    return compose_view([(scope, version.entries if version else ()) for scope, version in chain], token_budget)


# ------------------------------------------------------------------------------------------------ the wire


class ScopeServed(ServeModel):
    """One scope of a composed view: the playbook and the version it serves (0: none yet)."""

    playbook_id: str
    version: int = Field(ge=0)
    etag: str


class ComposedEntry(ServeModel):
    """An entry of a composed view: its scope, its id there as ``scope/entry_id``, and the entry itself."""

    scope: str
    qualified_id: str
    entry: PlaybookEntry


class ComposedPlaybook(ServeModel):
    """What ``GET /playbooks/{id}`` answers for a playbook with a parent: the composed view."""

    playbook_id: str
    etag: str
    scopes: list[ScopeServed] = Field(description="The playbook then its ancestors, nearest first.")
    entries: list[ComposedEntry] = Field(description="Its own entries, then each ancestor's, within the budget.")
    text: str = Field(description="The view as prompt text (ancestors under '# inherited from playbook <id>').")
    tokens: int = Field(ge=0)
    token_budget: int | None
    omitted: list[str] = Field(description="Qualified ids left out for the budget.")
    shadowed: list[str] = Field(description="Qualified ids of ancestors' entries a nearer scope holds the text of.")


class ComposedTaskContext(TaskContext):
    """The context for a task of a playbook with a parent: ``included_entry_ids`` are ``scope/entry_id``."""

    scopes: list[ScopeServed]


def scopes_of(chain: Chain) -> list[ScopeServed]:
    return [ScopeServed(playbook_id=scope, version=version.version if version else 0, etag=etag(version))
            for scope, version in chain]


def composed_playbook(chain: Chain, token_budget: int | None) -> ComposedPlaybook:
    """The composed view of ``chain[0]`` as served over HTTP and in events."""
    view = view_of(chain, token_budget)
    return ComposedPlaybook(
        playbook_id=chain[0][0], etag=chain_etag(chain, token_budget), scopes=scopes_of(chain),
        entries=[ComposedEntry(scope=item.scope, qualified_id=item.qualified_id, entry=item.entry)
                 for item in view.entries],
        text=view.text, tokens=view.tokens, token_budget=token_budget, omitted=list(view.omitted),
        shadowed=list(view.shadowed))


def render_composed(chain: Chain, token_budget: int | None) -> str:
    """The composed view as prompt text under a one-line header naming each scope's version (an MCP resource)."""
    view = view_of(chain, token_budget)
    if not view.entries and all(version is None for _, version in chain):
        return f"# playbook {chain[0][0]}: no version served yet\n"
    scopes = " + ".join(f"{scope} v{version.version if version else 0}" for scope, version in chain)
    return f"# playbook {chain[0][0]}: {scopes} ({len(view.entries)} entries)\n\n{view.text}\n"


def composed_index(view: ServedView, embedder: Embedder | None = None) -> RetrievalIndex:
    """The retrieval index of a composed view's entries, named ``scope/entry_id`` (built once per view)."""
    return RetrievalIndex.build(Playbook.from_entries(view.playbook_id, 0, [
        item.entry.model_copy(update={"entry_id": item.qualified_id}) for item in view.entries]), embedder)


def render_view_for_task(view: ServedView, index: RetrievalIndex, task: str, *, k: int,
                         token_budget: int | None) -> tuple[str, int, list[str]]:
    """(text, tokens, qualified ids) of the ``k`` entries of ``view`` most relevant to ``task`` (``index``'s
    relevance, as :func:`combee_core.playbook.retrieval.render_for_task`; ties by the nearer scope, then value),
    taken in that order until the first that does not fit ``token_budget``, rendered as the view is."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    relevance = index.embedding_relevance(task) if index.embedder is not None else index.lexical_relevance(task)
    order = {scope: depth for depth, scope in enumerate(view.scopes)}
    ranked = sorted(view.entries, key=lambda item: (-relevance[item.qualified_id], order[item.scope],
                                                     entry_value(item.entry)))
    chosen: set[str] = set()
    for item in ranked[:k]:
        trial = chosen | {item.qualified_id}
        if token_budget is not None and estimate_tokens(_render(view, trial)) > token_budget:
            break
        chosen = trial
    text = _render(view, chosen)
    return text, estimate_tokens(text), [item.qualified_id for item in view.entries if item.qualified_id in chosen]


def composed_context(chain: Chain, query: ContextQuery, token_budget: int | None) -> ComposedTaskContext:
    """The context for ``query.task`` among the composed view's entries (:func:`render_view_for_task`, lexical)."""
    view = view_of(chain, token_budget)
    text, tokens, included = render_view_for_task(view, composed_index(view), query.task, k=query.k,
                                                  token_budget=query.token_budget)
    own = chain[0][1]
    return ComposedTaskContext(
        playbook_id=query.playbook_id, version=own.version if own else 0, etag=chain_etag(chain, token_budget),
        task=query.task, k=query.k, token_budget=query.token_budget, text=text, tokens=tokens,
        included_entry_ids=included, scopes=scopes_of(chain))


def _render(view: ServedView, chosen: set[str]) -> str:
    return render_view(view.playbook_id, [item for item in view.entries if item.qualified_id in chosen])
