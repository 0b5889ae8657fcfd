"""When two lessons close in meaning say opposite things: a deterministic check over what an embedding cannot see.

A sentence embedding places "apply the discount before tax" and "... after tax" side by side (they share every
word but one), so meaning-closeness alone would merge a rule with its correction. :func:`conflict_reason` looks for
the differences that flip a rule:

- **polarity**: one text only forbids ("Do not ...", "Never ...", "... must not ...", in any clause) and the other
  forbids nothing; a text that forbids one thing and asks for another ("Do not X; do Y") is not compared so;
- **axes** with opposite poles: sort direction, position (first/last), recency, time zone (UTC/local), scope
  (final/intermediate), keep/remove, case, bounds (at most/at least), missing/zero, and units (km/miles,
  seconds/milliseconds, ...): both texts name a pole of the axis and no pole in common. A pole negated in its own
  clause ("not intermediate values", "do not remove"; in a prohibition, anywhere in it: "never count a cancelled
  order in the report as the number zero") counts as its opposite (binary axes) or not at all (units);
- **quantity**: both texts state quantities and they differ ("at most 3 times" / "at most 5 times"; "two" = "2"; a
  number not followed by what it counts, as in "sum 1." or "April 1, so", names a thing and is not compared);
- **order**: one text puts X before Y and the other Y before X ("before", "after", "then", "first", "once").

It errs towards "conflict": a conflict keeps both counters unchanged and lets evidence or the reducer decide, while
a false paraphrase would reinforce the rule being corrected. Measured by ``bench/semantic_catch.py``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from combee_core.playbook.similarity import _stem

_TOKEN = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*|[.;:,!?()]")
_BOUNDARY = frozenset(".;:,!?()")
_NEGATIONS = frozenset({"not", "no", "never", "dont", "don't", "cannot", "can't", "avoid", "nor", "doesnt",
                        "doesn't", "shouldnt", "shouldn't", "mustnt", "mustn't", "isnt", "isn't", "arent", "aren't"})
_PROHIBITION_STARTS = ("do not ", "dont ", "don't ", "never ", "avoid ", "you should not ", "you must not ",
                       "should not ", "must not ")
_MODAL_PROHIBITIONS = ("must not", "should not", "must never", "should never", "mustn't", "shouldn't")
_STATEMENT_STARTS = frozenset("the a an this that these those it its there their each every all any some no one"
                              " because since".split())
"""A clause starting so states a fact ("The first page is enough") rather than asking for something."""
_NUMBER_WORDS = {"two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8",
                 "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "twenty": "20", "hundred": "100",
                 "thousand": "1000", "single": "1", "twice": "2"}
_FILLER = frozenset(
    "a an the to of for in on at by with and or is are be been being was were it its this that these those as from"
    " into than so do does did you your we our they their should must can could will would may might please when"
    " whenever while if always make sure only any every each all them then there here just also".split()
)

# Phrases first (longest first), so "newest to oldest" is a sort direction, not two recency poles.
_PHRASES: tuple[tuple[str, str, str], ...] = (
    (r"\b(newest|latest|most recent|largest|highest|biggest)[ -](first|to (oldest|earliest|smallest|lowest))\b",
     "sort", "descending"),
    (r"\b(oldest|earliest|smallest|lowest)[ -](first|to (newest|latest|largest|highest))\b", "sort", "ascending"),
    (r"\b(oldest|earliest|smallest|lowest)( \w+){0,2} (at the top|on top)\b", "sort", "ascending"),
    (r"\b(newest|latest|largest|highest|biggest)( \w+){0,2} (at the top|on top)\b", "sort", "descending"),
    (r"\bkeep (on )?(request|try|retry|poll|go|fetch|check|call|send|read|loop|wait|ask|runn)ing\b", "continue",
     "continue"),  # "keep requesting pages": go on, not retain
    (r"\bmost recent\b", "recency", "latest"),
    (r"\bround\w* (\w+ ){0,3}?up\b|\bceil\w*", "rounding", "up"),
    (r"\bround\w* (\w+ ){0,3}?down\b|\btruncat\w*|\bfloor\b", "rounding", "down"),
    (r"\bnearest\b", "rounding", "nearest"),
    (r"\b(same|equal) weights?\b", "weighting", "equal"),
    (r"\bweight(s|ed|ing)?\b[^,;.]{0,40}\bby\b", "weighting", "weighted"),
    (r"\b(left|leave|leaving|leaves) (\w+ )?out\b", "keep", "remove"),
    (r"\bwhole numbers?\b", "precision", "whole"),
    (r"\bat most\b", "bound", "upper"),
    (r"\bat least\b", "bound", "lower"),
    (r"\bno (more|later) than\b", "bound", "upper"),
    (r"\bno (fewer|less|earlier) than\b", "bound", "lower"),
    (r"\b(every|each) (step|stage|intermediate)\b", "scope", "intermediate"),
    (r"\bas you go\b", "scope", "intermediate"),
    (r"\b(very end|last step|at the end)\b", "scope", "final"),
    (r"\bcoordinated universal time\b", "timezone", "utc"),
    (r"\blocal time( zones?)?\b", "timezone", "local"),
    (r"\blower ?case\b", "case", "lower"),
    (r"\bupper ?case\b", "case", "upper"),
)
_NAMED_POLES: tuple[tuple[str, str], ...] = (
    (r"\b([a-z]+)-first\b", "leading"),  # "day-first" / "month-first" dates, "newest-first" is a sort (above)
    (r"\b((dd|mm|yyyy|yy)([/.-](dd|mm|yyyy|yy))+)\b", "format"),
)
"""Axes whose pole is the matched text itself (any two different ones conflict)."""
_CLOSED_CLASSES: tuple[frozenset[str], ...] = (
    frozenset("monday tuesday wednesday thursday friday saturday sunday".split()),
    frozenset("january february march april june july august september october november december".split()),
    frozenset("up down".split()), frozenset("linear exponential constant".split()),
    frozenset("gram grams g kilogram kilograms kg pound pounds lb lbs ounce ounces oz".split()),
)
"""Words of one closed class: a rule with one swapped for another ("on Monday" / "on Sunday") is another rule."""
_IMPLIED: tuple[tuple[str, str, str], ...] = (
    (r"\b(as|to) (a |the number )?(zero|0)\b", "keep", "keep"),  # counted as zero: kept, not left out
)
"""Phrases that imply a pole besides their own (matched on the whole clause)."""
_WORD_POLES: dict[str, tuple[str, str]] = {}
for _axis, _poles in {
    "sort": {"ascending": "asc ascending increasing", "descending": "desc descending decreasing"},
    "position": {"first": "first top beginning", "last": "last bottom"},
    "recency": {"latest": "latest newest", "earliest": "earliest oldest"},
    "timezone": {"utc": "utc gmt", "local": "local"},
    "scope": {"final": "final", "intermediate": "intermediate"},
    "keep": {"keep": "keep keeps kept retain preserve include includes included including inclusive",
             "remove": "remove removes removed drop drops dropped delete deleted eliminate exclude excludes excluded "
                       "excluding exclusive skip skipped omit omitted discard discarded strip without"},
    "case": {"lower": "lowercase lowercased", "upper": "uppercase uppercased"},
    "bound": {"upper": "maximum max", "lower": "minimum min"},
    "value": {"missing": "missing null nan unknown", "zero": "zero 0"},
    "distance": {"km": "km kilometer kilometers kilometre kilometres", "mile": "mile miles mi"},
    "duration": {"s": "second seconds sec secs", "ms": "millisecond milliseconds ms", "min": "minute minutes"},
    "money": {"cent": "cent cents", "dollar": "dollar dollars"},
    "temperature": {"celsius": "celsius", "fahrenheit": "fahrenheit"},
    "statistic": {"median": "median", "mean": "mean average"},
    "period": {"previous": "previous prior preceding old original initial starting",
               "next": "next following upcoming new"},
    "weekday": {d: d for d in "monday tuesday wednesday thursday friday saturday sunday".split()},
    "month": {m: m for m in
              "january february march april june july august september october november december".split()},
    "days": {"business": "business working weekday weekdays", "calendar": "calendar"},
    "weighting": {"weighted": "weighted", "equal": "unweighted"},
    "precision": {"decimal": "decimal decimals", "whole": "integer integers"},
}.items():
    for _pole, _words in _poles.items():
        for _word in _words.split():
            _WORD_POLES[_word] = (_axis, _pole)
_BINARY = {axis: tuple(sorted({p for a, p in _WORD_POLES.values() if a == axis})) for axis in
           ("sort", "position", "recency", "timezone", "scope", "keep", "case", "bound", "value", "statistic", "days",
            "weighting")}
_MARKERS: dict[str, str] = {
    "immediate": r"\b(right away|at once|immediately|straight away|straight to|straight onto|as soon as|without "
                 r"(waiting|asking|checking|confirming|first)|directly)\b",
    "regardless": r"\b(even (when|if|for|though)|whoever|no matter|like any other|all the same)\b",
    "as_is": r"\b(as (they|it) (are|is|arrived?)(?! now)|as-is|unchanged|verbatim|bare|untouched|as the source|"
             r"in the order they arrived|from (memory|what you remember)|exactly (the )?same)\b",
}
"""Markers of a rule that waives a condition: done at once ("issue the refund right away"), whatever the case
("even when they contain commas"), or on the thing as it is ("write CSV fields bare"). A rule with one, not negated,
contradicts a rule close in meaning that has none and sets a condition (an order, a prerequisite, a treatment)."""
_ORDER = re.compile(r"\b(before|until|unless|after|once|first|then)\b")
_CONDITION = re.compile(r"\b(before|until|unless|first|only|after|once|then|wait|when|if|must)\b")
_UNIT_AXES = frozenset({"distance", "duration", "money", "temperature", "weekday", "month"})
"""Axes of units and names ("never answer in miles"): their words are compared by the axis, not as an action."""
_ADVERBS = frozenset("again ever yourself itself still also too".split())
_FLIP_PREFIXES = ("in", "un", "non")
_UN_PARTICIPLE = re.compile(r"un[a-z]{3,}ed")
_SYNONYMS = {"add": "sum", "total": "sum", "tally": "sum", "totaling": "sum", "totalling": "sum", "count": "sum",
             "normaliz": "convert", "normalis": "convert", "translat": "convert", "express": "convert",
             "read": "pars", "decod": "pars", "calculat": "comput", "subtract": "deduct", "remov": "deduct",
             "take": "deduct", "check": "verify", "confirm": "verify", "inspect": "verify", "review": "verify",
             "averag": "mean"}
"""Stems that name one step in order pairs ("add the amounts up first" / "sum only once converted")."""
_BEFORE = frozenset({"before", "until", "prior", "ahead", "first", "then", "earlier"})
_AFTER = frozenset({"after", "afterwards", "afterward", "once", "following", "later", "second"})


@dataclass(frozen=True, slots=True)
class RuleFeatures:
    """What :func:`conflict_reason` compares: prohibition, poles per axis, numbers, and order pairs of stems."""

    prohibition: bool | None
    """True when the rule only forbids ("A failed upload is final; do not retry it"), False when it forbids nothing,
    None when it forbids one thing and asks for another ("Do not X; do Y")."""
    poles: dict[str, frozenset[str]]
    numbers: frozenset[str]
    order: frozenset[tuple[str, str]]
    names: frozenset[str] = frozenset()
    """Words with digits that name a thing rather than count ("sum 1.", "R08"): two rules naming different things
    are different rules, not a conflict."""
    markers: frozenset[str] = frozenset()
    """:data:`_MARKERS` found outside a negated clause."""
    conditional: bool = False
    """The rule sets a condition (an order or prerequisite word outside a negated clause, or a marker negated)."""
    words: frozenset[str] = frozenset()
    """Its lowercase words, hyphenated parts split ("case-insensitively" -> "case", "insensitively")."""
    sequence: tuple[str, ...] = ()
    """Its lowercase words in order."""
    forbidden: tuple[frozenset[str], ...] = ()
    """Per negated clause of at least two content stems, those stems ("do not add VAT again": add, vat)."""
    asked: tuple[frozenset[str], ...] = ()
    """Per clause not negated, its content stems."""

    @classmethod
    def of(cls, text: str) -> RuleFeatures:
        lowered = text.lower().replace("\u2019", "'")
        poles: dict[str, set[str]] = {}
        clauses = split_clauses(lowered)
        prohibits, instructs = False, False
        numbers: set[str] = set()
        names: set[str] = set()
        markers: set[str] = set()
        conditional = False
        forbidden: list[frozenset[str]] = []
        asked: list[frozenset[str]] = []
        for clause in clauses:
            negated = any(w in _NEGATIONS or _UN_PARTICIPLE.fullmatch(w) for w in clause.split()) \
                or "rather than" in clause or "instead of" in clause
            conditional |= _CONDITION.search(clause) is not None
            condition = _ORDER.search(clause) is not None  # "do not X until Y" orders; "never X when Y" forbids
            # poles have their axes; what is left says what is done ("never answer in miles": answer)
            stems = frozenset(_content([t for t in _TOKEN.findall(clause)
                                        if t not in _BOUNDARY and t not in _ADVERBS
                                        and _WORD_POLES.get(t, ("", ""))[0] not in _UNIT_AXES]))
            if not negated:
                asked.append(stems)
            elif len(stems) >= 2 and not condition:
                forbidden.append(stems)
            for marker, pattern in _MARKERS.items():
                for match in re.finditer(pattern, clause):
                    if negated and (_negation_before(clause, match.start()) or _is_prohibition(clause)):
                        conditional = True  # "instead of retrying immediately", "never commit directly"
                    else:
                        markers.add(marker)
            found: list[tuple[str, str, int]] = []
            rest = clause
            for pattern, axis in _NAMED_POLES:
                for match in re.finditer(pattern, rest):
                    found.append((axis, match.group(1), match.start()))
                rest = re.sub(pattern, lambda m: " " * len(m.group()), rest)
            for pattern, axis, pole in _PHRASES:
                for match in re.finditer(pattern, rest):
                    found.append((axis, pole, match.start()))
                rest = re.sub(pattern, lambda m: " " * len(m.group()), rest)
            for pattern, axis, pole in _IMPLIED:
                found.extend((axis, pole, match.start()) for match in re.finditer(pattern, clause))
            words = list(re.finditer(r"[a-z0-9']+", rest))
            for index, match in enumerate(words):
                word = match.group()
                if word in _WORD_POLES:
                    found.append((*_WORD_POLES[word], match.start()))
                following = words[index + 1].group() if index + 1 < len(words) else ""
                # a quantity counts something ("3 times", "two decimals"); "sum 1." or "April 1, so" name a thing
                counts = bool(following) and following.isalpha() and following not in _FILLER
                if word.isdigit() and word != "0" and counts:
                    numbers.add(word)
                elif ordinal := re.fullmatch(r"(\d+)(st|nd|rd|th)", word):
                    names.add(ordinal.group(1))  # "the 29th of February" names what "February 29" does
                elif any(ch.isdigit() for ch in word) and word != "0":
                    names.add(word)
                elif word in _NUMBER_WORDS and counts:
                    numbers.add(_NUMBER_WORDS[word])
            for axis, pole, position in found:
                if negated and (_negation_before(clause, position) or _is_prohibition(clause)):
                    if axis in _BINARY and len(_BINARY[axis]) == 2:
                        pole = next(p for p in _BINARY[axis] if p != pole)
                    else:
                        continue
                poles.setdefault(axis, set()).add(pole)
            if _is_prohibition(clause) and not found and not condition:
                prohibits = True  # "do not X until Y" sets an order, it does not only forbid
            elif not negated and clause.split()[0] not in _STATEMENT_STARTS or _is_prohibition(clause):
                instructs = True  # an instruction, or a prohibition about a pole ("do not round intermediate values")
        # "Do not X; do Y" prohibits and instructs: its polarity is not compared
        prohibition = None if prohibits and instructs else prohibits
        all_words = frozenset(w for token in re.findall(r"[a-z0-9'-]+", lowered) for w in token.split("-") if w)
        return cls(prohibition, {a: frozenset(p) for a, p in poles.items()}, frozenset(numbers), _order_pairs(lowered),
                   frozenset(names), frozenset(markers), conditional, all_words,
                   tuple(re.findall(r"[a-z0-9']+", lowered)), tuple(forbidden), tuple(asked))


def _is_prohibition(clause: str) -> bool:
    clause = re.sub(r"^(so|and|but|or|then|thus) ", "", clause)
    return clause.startswith(_PROHIBITION_STARTS) or any(f" {m} " in f" {clause} " for m in _MODAL_PROHIBITIONS)


def split_clauses(text: str) -> list[str]:
    """``text``'s clauses (at punctuation, "but", "rather than", "instead of"), the rejected side of "rather than" /
    "instead of" marked "not ": what the conflict and requirement checks read clause by clause."""
    parts = re.split(r"[.;:!?]|,| but | rather than | instead of ", text)
    clauses = [p.strip() for p in parts if p.strip()]
    # keep "rather than"/"instead of" on the negated side: the part after it is what is rejected
    for marker in (" rather than ", " instead of "):
        if marker in text:
            tail = text.split(marker, 1)[1]
            clauses = [c if not tail.startswith(c) else "not " + c for c in clauses]
    return clauses or [text]


def _negation_before(clause: str, position: int) -> bool:
    """A negation among the six words before ``position``: "not", "never", ... or an un-participle ("carry
    unrounded numbers through every step": the steps are not rounded)."""
    return any(w in _NEGATIONS or _UN_PARTICIPLE.fullmatch(w) for w in clause[:position].split()[-6:]) \
        or clause.startswith("not ")


def _content(words: list[str]) -> list[str]:
    stems = [_stem(w) for w in words if w not in _FILLER and w not in _BEFORE and w not in _AFTER
             and w not in _NEGATIONS and not w.isdigit()]
    return [_SYNONYMS.get(stem, stem) for stem in stems]


def _order_pairs(text: str) -> frozenset[tuple[str, str]]:
    """(x, y) when the text says something about x happens before something about y (stems, per sentence)."""
    pairs: set[tuple[str, str]] = set()
    for sentence in re.split(r"[.!?;]", text):
        tokens = _TOKEN.findall(sentence)
        for i, token in enumerate(tokens):
            if token not in _BEFORE and token not in _AFTER:
                continue
            start = max((j + 1 for j in range(i) if tokens[j] in _BOUNDARY), default=0)
            end = next((j for j in range(i + 1, len(tokens)) if tokens[j] in _BOUNDARY), len(tokens))
            if token in ("first", "earlier"):  # "X first, then Y": X (this clause) before the rest of the sentence
                left, right = tokens[start:i], tokens[i + 1:]
            elif token == "then" and i == start:  # "X, then Y": X is the clause before the comma
                previous = max((j + 1 for j in range(start - 1) if tokens[j] in _BOUNDARY), default=0)
                left, right = tokens[previous:max(start - 1, 0)], tokens[i + 1:]
            elif i == start:  # "Before/After Y, X": the marker's clause is the reference, the rest the subject
                left, right = tokens[end + 1:], tokens[i + 1:end]
            else:  # "X before/after Y"
                left, right = tokens[start:i], tokens[i + 1:end] if token != "then" else tokens[i + 1:]
            before = token in _BEFORE
            if token == "until" and any(w in _NEGATIONS for w in left):
                before = False  # "do not X until Y": Y comes first
            earlier, later = (left, right) if before else (right, left)
            pairs.update((x, y) for x in _content(earlier) for y in _content(later) if x != y)
    return frozenset(p for p in pairs if (p[1], p[0]) not in pairs)


def conflict_between(a: RuleFeatures, b: RuleFeatures) -> str | None:
    """Why two rules (already close in meaning) contradict each other, or ``None``."""
    if a.prohibition is not None and b.prohibition is not None and a.prohibition != b.prohibition:
        return "polarity: one is a prohibition, the other is not"
    for axis in sorted(a.poles.keys() & b.poles.keys()):
        if not a.poles[axis] & b.poles[axis]:
            return f"{axis}: {'/'.join(sorted(a.poles[axis]))} vs {'/'.join(sorted(b.poles[axis]))}"
    if a.numbers and b.numbers and a.numbers != b.numbers:
        return f"quantity: {', '.join(sorted(a.numbers))} vs {', '.join(sorted(b.numbers))}"
    for first, second in ((a, b), (b, a)):
        for marker in sorted(first.markers - second.markers):
            if marker != "immediate" or second.conditional:
                return f"{marker}: one waives the condition the other sets"
    if (flipped := _prefix_flip(a.words, b.words) or _prefix_flip(b.words, a.words)) is not None:
        return f"polarity: {flipped}"
    for first, second in ((a, b), (b, a)):
        for stems in first.forbidden:
            if any(stems <= other for other in second.asked) and not any(stems <= own for own in first.asked):
                return f"polarity: one forbids what the other asks ({', '.join(sorted(stems))})"
    if (swap := _polarity_swap(a.sequence, b.sequence)) is not None:
        return f"polarity: {swap}"
    if (swap := _class_swap(a.sequence, b.sequence)) is not None:
        return f"swapped within a closed class: {swap}"
    reversed_pairs = sorted(p for p in a.order if (p[1], p[0]) in b.order)
    if reversed_pairs and len(reversed_pairs) >= len(a.order & b.order):  # not outnumbered by agreeing pairs
        x, y = reversed_pairs[0]
        return f"order: {x!r} before {y!r} vs after"
    return None


def _class_swap(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """One word of a closed class replaced by another of it, the rest of the sentence alike."""
    if not a or not b:
        return None
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.ratio() < 0.6:
        return None
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1:
            x, y = a[i1], b[j1]
            if any(x in words and y in words for words in _CLOSED_CLASSES):
                return f"{x!r} vs {y!r}"
    return None


@dataclass(frozen=True, slots=True)
class WordSwap:
    """One word of a text (``old``) in the place of another's (``new``), the two texts one frame otherwise."""

    old: str
    new: str
    in_object: bool
    """Whether the word stands in the sentence's object (the words after its first, determiners skipped, up to the
    first function word: "Quote *file paths* that contain spaces", "Keep the *original order* of items"): a swapped
    object is another thing acted on (two lessons); a swapped verb or adjunct ("*Lower* the TTL", "greet customers by
    their *preferred* name") is one action on one thing done another way."""


_OBJECT_ENDS = _FILLER | frozenset("not no never without with about over under through across per via like".split())


def one_word_swap(a: str, b: str) -> WordSwap | None:
    """The one word of ``a`` and the one word of ``b`` that stand in each other's place when the two texts are one
    sentence frame otherwise, word for word ("Lower the DNS TTL a day before ..." / "Raise the DNS TTL a day before
    ..."), or None: more or other differences, a function word swapped, or two forms of one word (one stem, or one
    step of :data:`_SYNONYMS`). Whether the two words name different things (two lessons) the caller decides; else,
    close in meaning, they are synonyms or antonyms, which no embedding tells apart."""
    found = _one_word_change(_sentence_words(a), _sentence_words(b))
    if found is None:
        return None
    index, x, y = found
    if not (x.isalpha() and y.isalpha()) or x in _FILLER or y in _FILLER or x in _NEGATIONS or y in _NEGATIONS:
        return None
    stem_x, stem_y = _stem(x), _stem(y)
    if stem_x == stem_y or _SYNONYMS.get(stem_x, stem_x) == _SYNONYMS.get(stem_y, stem_y):
        return None
    return WordSwap(x, y, index in _object_slot(_sentence_words(a)))


def _sentence_words(text: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[a-z0-9']+", text.lower().replace("\u2019", "'")))


def _one_word_change(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[int, str, str] | None:
    """(position, word of ``a``, word of ``b``) when ``a`` and ``b`` differ in exactly one word replaced by one."""
    changes = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(changes) != 1 or changes[0][0] != "replace":
        return None
    _, i1, i2, j1, j2 = changes[0]
    return (i1, a[i1], b[j1]) if i2 - i1 == 1 and j2 - j1 == 1 else None


def _object_slot(words: tuple[str, ...]) -> frozenset[int]:
    """Positions of the object: after the first word, leading determiners skipped, up to the first function word."""
    start = 1
    while start < len(words) and words[start] in _FILLER:
        start += 1
    end = start
    while end < len(words) and words[end] not in _OBJECT_ENDS:
        end += 1
    return frozenset(range(start, end))


_BOOLEAN = frozenset({frozenset({"on", "off"}), frozenset({"true", "false"}), frozenset({"yes", "no"})})
"""Pairs of a switch's values: one swapped for the other in one frame ("default to off" / "... to on") flips it."""


_ARTICLES = frozenset({"a", "an", "the"})
_NEGATING = _NEGATIONS | {"non"}
"""Words that negate what follows; "non" is the first part of "non-root" as the texts are split into words."""


def _polarity_swap(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """A negation in one text where the other, one frame otherwise (articles aside), has a word that negates nothing
    or none at all ("Always sort ... before paginating" / "Never sort ...", "Sort ..." / "Do not sort ...", "as a
    non-root user" / "as the root user"), or a switch's value swapped for the other ("on" / "off")."""
    found = _one_word_change(a, b)
    if found is not None:
        _, x, y = found
        if (x in _NEGATING) != (y in _NEGATING) or frozenset({x, y}) in _BOOLEAN:
            return f"{x!r} vs {y!r} in one frame"
    bare_a, bare_b = [w for w in a if w not in _ARTICLES], [w for w in b if w not in _ARTICLES]
    changes = [op for op in difflib.SequenceMatcher(None, bare_a, bare_b, autojunk=False).get_opcodes()
               if op[0] != "equal"]
    if len(changes) == 1 and changes[0][0] in ("insert", "delete"):
        _, i1, i2, j1, j2 = changes[0]
        added = bare_a[i1:i2] or bare_b[j1:j2]
        if any(w in _NEGATING for w in added) and all(w in _NEGATING or w in ("do", "does") for w in added):
            return f"{' '.join(added)!r} added in one frame"
    return None


def _prefix_flip(a: frozenset[str], b: frozenset[str]) -> str | None:
    """A word of ``a`` that is a word of ``b`` negated by a prefix ("insensitively" / "sensitively"), when neither
    text has the other's form."""
    stems_a, stems_b = {_stem(w) for w in a}, {_stem(w) for w in b}
    for word in sorted(a):
        for prefix in _FLIP_PREFIXES:
            base = _stem(word[len(prefix):])
            if word.startswith(prefix) and len(base) >= 4 and base in stems_b and base not in stems_a \
                    and _stem(word) not in stems_b:
                return f"{word!r} vs {word[len(prefix):]!r}"
    return None


def conflict_reason(a: str, b: str) -> str | None:
    """Why text ``a`` contradicts text ``b`` (see the module doc), or ``None``."""
    return conflict_between(RuleFeatures.of(a), RuleFeatures.of(b))
