"""The playbook: an immutable value of entries, the operation algebra over it, deduplication and rendering.

Everything here is pure and deterministic: the same playbook and operations give the same result, byte for byte.
Nothing iterates over a ``set`` or a hash-ordered structure, and no randomness is used. Import from this package;
its modules, one job each: ``value`` (ids, :class:`Playbook` and its invariants), ``similarity`` (near-duplicates
and paraphrases), ``embedding`` (the embedder seam, the offline model, the cache), ``conflict`` (when two rules
contradict), ``meaning`` (the judges curation consults), ``operations`` (the operation algebra, applied in order;
its parts ``working_playbook``, ``additions``, ``supersession``, ``edits``), ``dedupe`` (near-identical entries
merged), ``aliases`` (wordings folded into an entry unconfirmed), ``outcomes`` (each entry's outcome credit from the
traces), ``challenges`` (contradictions settled by accumulated evidence and outcomes), ``render`` (prompt text,
tokens), ``retrieval`` (the entries one task needs).
"""

from combee_core.playbook.dedupe import deduplicate, deduplication_operations
from combee_core.playbook.operations import MAX_MERGE_IDS, apply_operations
from combee_core.playbook.render import (
    RenderedPlaybook,
    estimate_tokens,
    playbook_tokens,
    render_entry,
    render_playbook,
    section_header,
)
from combee_core.playbook.retrieval import DEFAULT_TOP_K, rank_for_task, render_for_task
from combee_core.playbook.similarity import (
    NEAR_DUPLICATE_THRESHOLD,
    PARAPHRASE_MIN_JACCARD,
    PARAPHRASE_MIN_OVERLAP,
    is_near_duplicate,
    is_paraphrase,
    normalise_text,
    text_similarity,
)
from combee_core.playbook.value import (
    ID_COUNTER_DIGITS,
    ID_PREFIX_CHARS,
    ApplyResult,
    Playbook,
    PlaybookError,
    entry_id_number,
    entry_id_prefix,
    entry_sort_key,
    make_entry_id,
)

__all__ = [
    "DEFAULT_TOP_K",
    "rank_for_task",
    "render_for_task",
    "ID_COUNTER_DIGITS",
    "ID_PREFIX_CHARS",
    "MAX_MERGE_IDS",
    "NEAR_DUPLICATE_THRESHOLD",
    "PARAPHRASE_MIN_JACCARD",
    "PARAPHRASE_MIN_OVERLAP",
    "ApplyResult",
    "Playbook",
    "PlaybookError",
    "RenderedPlaybook",
    "apply_operations",
    "deduplicate",
    "deduplication_operations",
    "entry_id_number",
    "entry_id_prefix",
    "entry_sort_key",
    "estimate_tokens",
    "is_near_duplicate",
    "is_paraphrase",
    "make_entry_id",
    "normalise_text",
    "playbook_tokens",
    "render_entry",
    "render_playbook",
    "section_header",
    "text_similarity",
]
