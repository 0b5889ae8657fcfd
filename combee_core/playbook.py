"""The playbook: an immutable value of entries, the operation algebra over it, deduplication and rendering.

Everything here is pure and deterministic: the same playbook and operations give the same result, byte for byte.
Nothing iterates over a ``set`` or a hash-ordered structure, and no randomness is used.

Entry ids are ``<first 3 chars of section>-<5+ digit counter>`` (``for-00001``). The counter is playbook-wide and
only grows, so an id is never reused after its entry is deleted or merged away.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from combee_core.errors import CombeeError
from combee_core.models import AddOp, AppliedOperation, DeleteOp, MergeOp, Operation, PlaybookEntry, TagOp, UpdateOp

ID_PREFIX_CHARS = 3
ID_COUNTER_DIGITS = 5
NEAR_DUPLICATE_THRESHOLD = 0.9
MAX_MERGE_IDS = 32
"""Largest ``MergeOp.entry_ids`` the model accepts; :func:`deduplicate` splits bigger clusters."""

_ID_COUNTER = re.compile(r"-(\d+)$")
_APOSTROPHES = re.compile(r"['\u2019`]")
_PUNCTUATION = re.compile(r"[^\w\s]|_")
_NEGATIONS = frozenset(
    {"not", "no", "never", "nor", "none", "nothing", "cannot", "without"}
    | {"dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "cant", "couldnt", "wont", "wouldnt"}
    | {"shouldnt", "mustnt", "neednt", "hasnt", "havent", "hadnt"}
)


class PlaybookError(CombeeError, ValueError):
    """A playbook value that breaks an invariant (duplicate ids, bad order, bad version)."""


# ---------------------------------------------------------------------------------------------- ids


def entry_id_prefix(section: str) -> str:
    """The id prefix of a section: its first three characters (``formulas`` -> ``for``)."""
    return section[:ID_PREFIX_CHARS]


def make_entry_id(section: str, number: int) -> str:
    """The id of the ``number``-th entry ever created in a playbook, in ``section``."""
    return f"{entry_id_prefix(section)}-{number:0{ID_COUNTER_DIGITS}d}"


def entry_id_number(entry_id: str) -> int | None:
    """The counter of an id made by :func:`make_entry_id`, or ``None`` for an id without one."""
    match = _ID_COUNTER.search(entry_id)
    return int(match.group(1)) if match else None


def _entry_sort_key(entry: PlaybookEntry) -> tuple[str, int, str]:
    """Section, then counter (numerically, so ``for-100000`` follows ``for-99999``), then the id itself."""
    number = entry_id_number(entry.entry_id)
    return (entry.section, -1 if number is None else number, entry.entry_id)


# ---------------------------------------------------------------------------------------------- playbook


@dataclass(frozen=True, slots=True)
class Playbook:
    """A playbook version as a value: entries ordered by section then id, and the next id counter.

    Construct with :meth:`empty` or :meth:`from_entries`; change with :func:`apply_operations`, which returns a
    new ``Playbook``. The constructor checks the invariants and raises :class:`PlaybookError`.
    """

    playbook_id: str
    version: int
    entries: tuple[PlaybookEntry, ...]
    next_entry_number: int

    def __post_init__(self) -> None:
        if self.version < 0:
            raise PlaybookError(f"version must be >= 0, got {self.version}")
        keys = [_entry_sort_key(e) for e in self.entries]
        if keys != sorted(keys):
            raise PlaybookError("entries must be ordered by section then entry id")
        seen: dict[str, None] = {}
        for entry in self.entries:
            if entry.entry_id in seen:
                raise PlaybookError(f"duplicate entry id {entry.entry_id!r}")
            seen[entry.entry_id] = None
            number = entry_id_number(entry.entry_id)
            if number is not None and number >= self.next_entry_number:
                raise PlaybookError(
                    f"next_entry_number {self.next_entry_number} would reuse the counter of {entry.entry_id!r}"
                )

    @classmethod
    def empty(cls, playbook_id: str) -> Playbook:
        """The version-0 playbook with no entries."""
        return cls(playbook_id=playbook_id, version=0, entries=(), next_entry_number=1)

    @classmethod
    def from_entries(
        cls,
        playbook_id: str,
        version: int,
        entries: Iterable[PlaybookEntry],
        next_entry_number: int | None = None,
    ) -> Playbook:
        """Rebuild a playbook (e.g. from a published ``PlaybookVersion``); entries may come in any order.

        The counter becomes one past the largest id counter present, or ``next_entry_number`` when that is
        larger. Pass it when known: if the newest entries were deleted, the entries alone cannot tell how far
        the counter went, and their ids would otherwise be handed out again.
        """
        ordered = tuple(sorted(entries, key=_entry_sort_key))
        numbers = [n for n in (entry_id_number(e.entry_id) for e in ordered) if n is not None]
        derived = max(numbers, default=0) + 1
        return cls(
            playbook_id=playbook_id,
            version=version,
            entries=ordered,
            next_entry_number=max(derived, next_entry_number or 1),
        )

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def entry_ids(self) -> tuple[str, ...]:
        """Entry ids in playbook order."""
        return tuple(e.entry_id for e in self.entries)

    @property
    def sections(self) -> tuple[str, ...]:
        """Sections that have at least one entry, in order."""
        return tuple(dict.fromkeys(e.section for e in self.entries))

    def get(self, entry_id: str) -> PlaybookEntry | None:
        """The entry with this id, or ``None``."""
        for entry in self.entries:
            if entry.entry_id == entry_id:
                return entry
        return None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """The playbook after a list of operations, and what became of each operation (same order as input)."""

    playbook: Playbook
    applied: list[AppliedOperation] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- near-duplicates


def normalise_text(text: str) -> str:
    """Lowercase, drop apostrophes (``don't`` -> ``dont``), turn other punctuation into spaces, collapse spaces."""
    text = _APOSTROPHES.sub("", text.lower())
    return " ".join(_PUNCTUATION.sub(" ", text).split())


@dataclass(frozen=True, slots=True)
class _ComparableText:
    """A text prepared for similarity checks: its normalised words, their counts, and its negation words."""

    words: tuple[str, ...]
    vocabulary: frozenset[str]
    counts: Counter[str]
    negations: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> _ComparableText:
        words = tuple(normalise_text(text).split())
        negations = tuple(sorted(w for w in words if w in _NEGATIONS))
        return cls(words, frozenset(words), Counter(words), negations)


def _similarity(a: _ComparableText, b: _ComparableText, threshold: float = 0.0) -> float:
    """Word ratio; returns an upper bound below ``threshold`` as soon as a cheap bound rules a match out."""
    if a.words == b.words:
        return 1.0
    total = len(a.words) + len(b.words)
    if not a.words or not b.words:
        return 0.0
    upper = 2.0 * min(len(a.words), len(b.words)) / total  # length bound (difflib's real_quick_ratio)
    if upper < threshold:
        return upper
    # Each distinct word of one text missing from the other costs at least one match (set ops run in C).
    matches = min(len(a.words) - len(a.vocabulary - b.vocabulary), len(b.words) - len(b.vocabulary - a.vocabulary))
    upper = 2.0 * matches / total
    if upper < threshold:
        return upper
    upper = 2.0 * sum((a.counts & b.counts).values()) / total  # shared-word bound (difflib's quick_ratio)
    if upper < threshold:
        return upper
    return difflib.SequenceMatcher(None, a.words, b.words, autojunk=False).ratio()


def _near_duplicates(a: _ComparableText, b: _ComparableText, threshold: float) -> float | None:
    """Similarity when the texts are near-duplicates, else ``None``."""
    if a.negations != b.negations:
        return None
    score = _similarity(a, b, threshold)
    return score if score >= threshold else None


def text_similarity(a: str, b: str) -> float:
    """Similarity in [0, 1] of two texts: difflib's ratio ``2*M/T`` over the words of their normalised forms.

    Word-level ratio rather than character-level: it counts the share of words two entries have in common, in
    order (unlike Jaccard over shingles, where one changed word in a short entry removes three shingles and a
    0.9 threshold means "identical"). It is deterministic (``autojunk`` is off) and cheap: an entry is tens of
    words, and length and shared-word bounds skip most pairs. With the 0.9 threshold, one changed word is
    tolerated from 10 words on; in shorter entries one word usually changes the meaning.
    """
    return _similarity(_ComparableText.of(a), _ComparableText.of(b))


def is_near_duplicate(a: str, b: str, threshold: float = NEAR_DUPLICATE_THRESHOLD) -> bool:
    """True when :func:`text_similarity` is at least ``threshold`` and both say "not" the same way.

    The negation guard keeps "always X" and "never X" (or "do not X") apart, which a purely lexical
    similarity would call near-identical in a long entry.
    """
    return _near_duplicates(_ComparableText.of(a), _ComparableText.of(b), threshold) is not None


PARAPHRASE_MIN_OVERLAP = 0.8
PARAPHRASE_MIN_JACCARD = 0.6
_STOPWORDS = frozenset(
    "a an the to of for in on at by with and or is are be been being was were it its this that these those as from"
    " into than then so do does did you your we our they their should must can could will would may might please"
    " when whenever while if always remember note make sure instead rather using use"
    " apply any every each all".split()
)


def _stem(word: str) -> str:
    """A crude suffix strip (``parsing`` and ``parse`` -> ``pars``, ``applied`` -> ``apply``), so inflections
    compare equal."""
    if len(word) > 4 and word.endswith(("ies", "ied")):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix) and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def _content_words(text: _ComparableText) -> frozenset[str]:
    return frozenset(_stem(w) for w in text.vocabulary if w not in _STOPWORDS and w not in _NEGATIONS)


def _paraphrases(a: _ComparableText, b: _ComparableText) -> float | None:
    """Jaccard similarity of the content words when two texts read as one lesson in other words, else ``None``."""
    if a.negations != b.negations:
        return None
    words_a, words_b = _content_words(a), _content_words(b)
    if len(words_a) < 3 or len(words_b) < 3:
        return None
    if {w for w in words_a if any(c.isdigit() for c in w)} != {w for w in words_b if any(c.isdigit() for c in w)}:
        return None  # numbers and ids (R08, 29, 2024) must agree
    shared = len(words_a & words_b)
    overlap = shared / min(len(words_a), len(words_b))
    jaccard = shared / len(words_a | words_b)
    return jaccard if overlap >= PARAPHRASE_MIN_OVERLAP and jaccard >= PARAPHRASE_MIN_JACCARD else None


def is_paraphrase(a: str, b: str) -> bool:
    """True when two texts look like one lesson in other words: a deterministic lexical test, no model.

    Both texts are reduced to their content words (normalised, stop words and filler such as "remember" or
    "make sure" dropped, a crude suffix strip); they are paraphrases when the shared words are at least 80% of the
    smaller set and 60% of the union, their numbers and ids (any word with a digit) are the same, and they say
    "not" the same way. Word order does not matter, so reordered clauses match; synonyms do not (``bench/
    paraphrase_catch.py`` measures the catch and false-merge rates on a hand-written set).
    """
    return _paraphrases(_ComparableText.of(a), _ComparableText.of(b)) is not None


# ---------------------------------------------------------------------------------------------- operations


class _WorkingPlaybook:
    """Mutable scratch state for one :func:`apply_operations` call (never escapes it)."""

    def __init__(self, playbook: Playbook, new_version: int, threshold: float, max_removals: int | None = None,
                 paraphrases: bool = True) -> None:
        self.entries: dict[str, PlaybookEntry] = {e.entry_id: e for e in playbook.entries}
        self.original: frozenset[str] = frozenset(self.entries)
        self.max_removals = max_removals
        self.paraphrases = paraphrases
        self.removals = 0
        """Entries of the original playbook removed so far (DELETE, and MERGE's removed ids)."""
        self.removed: dict[str, str] = {}
        self.next_number = playbook.next_entry_number
        self.new_version = new_version
        self.threshold = threshold
        self._texts: dict[str, _ComparableText] = {}

    def text(self, content: str) -> _ComparableText:
        cached = self._texts.get(content)
        if cached is None:
            cached = self._texts[content] = _ComparableText.of(content)
        return cached

    def missing(self, entry_id: str) -> str | None:
        """Why ``entry_id`` cannot be used, or ``None`` when it exists."""
        if entry_id in self.entries:
            return None
        if entry_id in self.removed:
            return f"entry {entry_id} was removed earlier in this batch ({self.removed[entry_id]})"
        return f"unknown entry id {entry_id}"

    def apply(self, op: Operation) -> AppliedOperation:
        if isinstance(op, AddOp):
            return self._add(op)
        if isinstance(op, UpdateOp):
            return self._update(op)
        if isinstance(op, MergeOp):
            return self._merge(op)
        if isinstance(op, DeleteOp):
            return self._delete(op)
        if isinstance(op, TagOp):
            return self._tag(op)
        raise TypeError(f"not an operation: {type(op).__name__}")  # unreachable for valid Operation values

    def over_cap(self, removing: Iterable[str]) -> str | None:
        """Why removing these entries would break the per-version removal cap, or ``None``."""
        if self.max_removals is None:
            return None
        count = sum(1 for entry_id in removing if entry_id in self.original)
        if self.removals + count <= self.max_removals:
            return None
        return (f"delete cap: one version may remove at most {self.max_removals} of the previous version's entries "
                f"({self.removals} already removed)")

    def _add(self, op: AddOp) -> AppliedOperation:
        text = self.text(op.content)
        best: tuple[float, PlaybookEntry] | None = None
        kind = "near-duplicate"
        for entry in self.entries.values():
            if entry.section != op.section:
                continue
            score = _near_duplicates(text, self.text(entry.content), self.threshold)
            if score is None:
                continue
            if best is None or score > best[0] or (
                score == best[0] and _entry_sort_key(entry) < _entry_sort_key(best[1])
            ):
                best = (score, entry)
        if best is None and self.paraphrases:
            kind = "paraphrase"
            for entry in self.entries.values():
                if entry.section != op.section:
                    continue
                score = _paraphrases(text, self.text(entry.content))
                if score is not None and (best is None or score > best[0] or (
                    score == best[0] and _entry_sort_key(entry) < _entry_sort_key(best[1])
                )):
                    best = (score, entry)
        if best is not None:
            target = best[1]
            self.entries[target.entry_id] = target.model_copy(
                update={"helpful": target.helpful + op.support, "updated_version": self.new_version}
            )
            return AppliedOperation(
                operation=op,
                outcome="applied",
                reason=f"{kind} of {target.entry_id}",
                entry_id=target.entry_id,
            )
        entry_id = make_entry_id(op.section, self.next_number)
        self.next_number += 1
        self.entries[entry_id] = PlaybookEntry(
            entry_id=entry_id,
            section=op.section,
            content=op.content,
            created_version=self.new_version,
            updated_version=self.new_version,
        )
        return AppliedOperation(operation=op, outcome="applied", reason="added", entry_id=entry_id)

    def _update(self, op: UpdateOp) -> AppliedOperation:
        if (why := self.missing(op.entry_id)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        entry = self.entries[op.entry_id]
        if entry.content == op.content:
            return AppliedOperation(
                operation=op, outcome="applied", reason="content unchanged", entry_id=op.entry_id
            )
        self.entries[op.entry_id] = entry.model_copy(
            update={"content": op.content, "updated_version": self.new_version}
        )
        return AppliedOperation(operation=op, outcome="applied", reason="updated", entry_id=op.entry_id)

    def _merge(self, op: MergeOp) -> AppliedOperation:
        listed: dict[str, None] = {}
        for entry_id in op.entry_ids:
            if entry_id in listed:
                return AppliedOperation(
                    operation=op, outcome="rejected", reason=f"entry {entry_id} is listed more than once"
                )
            listed[entry_id] = None
            if (why := self.missing(entry_id)) is not None:
                return AppliedOperation(operation=op, outcome="rejected", reason=why)
        if (why := self.over_cap(op.entry_ids[1:])) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        merged = [self.entries[entry_id] for entry_id in op.entry_ids]
        keep, others = merged[0], merged[1:]
        self.removals += sum(1 for e in others if e.entry_id in self.original)
        self.entries[keep.entry_id] = keep.model_copy(
            update={
                "content": op.content,
                "helpful": sum(e.helpful for e in merged),
                "harmful": sum(e.harmful for e in merged),
                "updated_version": self.new_version,
            }
        )
        for other in others:
            del self.entries[other.entry_id]
            self.removed[other.entry_id] = f"merged into {keep.entry_id}"
        return AppliedOperation(
            operation=op,
            outcome="applied",
            reason=f"merged {', '.join(e.entry_id for e in others)} into {keep.entry_id}",
            entry_id=keep.entry_id,
        )

    def _delete(self, op: DeleteOp) -> AppliedOperation:
        if (why := self.missing(op.entry_id)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        if (why := self.over_cap([op.entry_id])) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        self.removals += 1 if op.entry_id in self.original else 0
        del self.entries[op.entry_id]
        self.removed[op.entry_id] = "deleted"
        return AppliedOperation(operation=op, outcome="applied", reason="deleted", entry_id=op.entry_id)

    def _tag(self, op: TagOp) -> AppliedOperation:
        if (why := self.missing(op.entry_id)) is not None:
            return AppliedOperation(operation=op, outcome="rejected", reason=why)
        if op.tag == "neutral":
            return AppliedOperation(
                operation=op, outcome="applied", reason="neutral tag: no change", entry_id=op.entry_id
            )
        entry = self.entries[op.entry_id]
        self.entries[op.entry_id] = entry.model_copy(
            update={op.tag: getattr(entry, op.tag) + op.count, "updated_version": self.new_version}
        )
        return AppliedOperation(
            operation=op, outcome="applied", reason=f"{op.tag} +{op.count}", entry_id=op.entry_id
        )

    def result(self, playbook_id: str) -> Playbook:
        return Playbook(
            playbook_id=playbook_id,
            version=self.new_version,
            entries=tuple(sorted(self.entries.values(), key=_entry_sort_key)),
            next_entry_number=self.next_number,
        )


def apply_operations(
    playbook: Playbook,
    operations: Sequence[Operation],
    new_version: int,
    *,
    near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD,
    max_removals: int | None = None,
    paraphrases: bool = True,
) -> ApplyResult:
    """Apply ``operations`` in order to ``playbook``, giving version ``new_version``; never raises for an op.

    - ADD creates ``<prefix>-<counter>`` with ``helpful=harmful=0``, unless an entry of the same section is a
      near-duplicate (:func:`is_near_duplicate`) or, with ``paraphrases``, a paraphrase (:func:`is_paraphrase`)
      of it (the most similar one, ties to the lowest id): then that entry is reinforced, ``helpful +=
      op.support``, and the op is applied with reason ``near-duplicate of <id>`` (``paraphrase of <id>``).
    - ``max_removals``: at most this many entries of ``playbook`` may be removed by the operations (DELETE, and
      the ids a MERGE removes); an op that would remove more is rejected with the reason ``delete cap: ...``.
    - UPDATE replaces the content (identical content is applied and changes nothing).
    - MERGE keeps the first id (its section and ``created_version``) with the new content and the summed
      counters of all listed entries, and removes the others.
    - DELETE removes the entry. TAG adds ``count`` to ``helpful`` or ``harmful``; ``neutral`` changes nothing.
    - An op naming an unknown id (including one removed earlier in the list) or a MERGE listing an id twice is
      rejected with the reason and changes nothing. Rejected ops have ``entry_id=None``.

    Each op sees the result of the ones before it. Every changed entry gets ``updated_version=new_version``.
    Raises :class:`PlaybookError` only when ``new_version`` is below the playbook's version.
    """
    if new_version < playbook.version:
        raise PlaybookError(f"new_version {new_version} is below the playbook's version {playbook.version}")
    work = _WorkingPlaybook(playbook, new_version, near_duplicate_threshold, max_removals, paraphrases)
    applied = [work.apply(op) for op in operations]
    return ApplyResult(playbook=work.result(playbook.playbook_id), applied=applied)


def _entry_value(entry: PlaybookEntry) -> tuple[int, tuple[str, int, str]]:
    """Priority key: higher ``helpful - harmful`` first, then playbook order."""
    return (-(entry.helpful - entry.harmful), _entry_sort_key(entry))


def deduplication_operations(
    playbook: Playbook, threshold: float = NEAR_DUPLICATE_THRESHOLD
) -> list[MergeOp]:
    """MERGE operations that fold near-identical entries of each section together.

    Entries are visited in playbook order; each joins the first earlier cluster whose *first* entry it
    near-duplicates (no chaining, so clusters cannot drift). A cluster keeps its first (oldest) id and takes the
    content of its best entry (``helpful - harmful`` desc, then id). Clusters larger than the 32 ids a MERGE may
    list become several MERGEs into the same first id.
    """
    clusters: list[list[PlaybookEntry]] = []
    texts = {e.entry_id: _ComparableText.of(e.content) for e in playbook.entries}
    for entry in playbook.entries:
        for cluster in clusters:
            head = cluster[0]
            if head.section == entry.section and _near_duplicates(
                texts[entry.entry_id], texts[head.entry_id], threshold
            ) is not None:
                cluster.append(entry)
                break
        else:
            clusters.append([entry])
    operations: list[MergeOp] = []
    for cluster in clusters:
        if len(cluster) < 2:
            continue
        head, rest = cluster[0], cluster[1:]
        content = min(cluster, key=_entry_value).content
        step = MAX_MERGE_IDS - 1
        for start in range(0, len(rest), step):
            ids = [head.entry_id, *(e.entry_id for e in rest[start : start + step])]
            operations.append(MergeOp(entry_ids=ids, content=content))
    return operations


def deduplicate(
    playbook: Playbook, new_version: int, threshold: float = NEAR_DUPLICATE_THRESHOLD
) -> ApplyResult:
    """Merge near-identical entries within each section, recorded as MERGE operations in the result."""
    return apply_operations(
        playbook,
        deduplication_operations(playbook, threshold),
        new_version,
        near_duplicate_threshold=threshold,
    )


# ---------------------------------------------------------------------------------------------- rendering


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

    max_chars = token_budget * 4
    chosen: dict[str, None] = {}
    sections: dict[str, None] = {}
    length = 0
    for entry in sorted(playbook.entries, key=_entry_value):
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
