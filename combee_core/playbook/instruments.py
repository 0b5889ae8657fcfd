"""What a rule does its action with, when that is a named tool: "Hash passwords with MD5" (md5), "Store passwords as
argon2 or bcrypt digests" (argon2).

A correction often replaces the tool a rule names and says nothing else against it: "Hash passwords with MD5" /
"Store passwords as argon2 or bcrypt digests" share one content word, no polarity, axis or number differs, and the
judge's "names different things" test reads them as two lessons. Yet agents cannot follow both: one action on one
object, done with one tool or with another. What sets this apart from two lessons in one frame ("Quote file paths
that contain spaces" / "Quote arguments that contain spaces", a swapped *object*) is the slot: the thing swapped is
what the action is done *with* ("with / using / via / as X"), and the action on its object stays.

:func:`tools_of` reads, per clause, the action (the clause's words before its first marker), the thing it is done
on (the action's words after its verb, or before the auxiliary of a passive or modal clause) and the *names* in the
instrument phrase after the marker (up to the first function word other than "or" / "and", at most
:data:`MAX_TOOL_WORDS` words). A name is a word written with a digit ("md5", "argon2", "sha-256", "utf-8"; a bare
number counts, it does not name) or with a capital after its first letter ("MD5", "PostgreSQL", "JSON"): a tool's,
format's or algorithm's name, which has no synonym to be reworded into, so two different names are two tools. A
common word in the slot ("with a timeout" / "with retries": two things a request can have at once; "as missing
values" / "as null": one thing reworded) is not read: an embedding cannot tell those apart, a name needs no
embedding. "such as X", "as soon / well / long as" are no instruments. A clause that forbids (negated) rejects its
tools ("never keep passwords as MD5").

:func:`tool_swap` compares two texts' tools with a similarity of phrases supplied by the caller (the judge's
embedding): a swap is one action on one thing (both alike) asked with tools that share no name
(:func:`same_name`: "UTF-8" is "utf8"), or asked with a tool the other text's same action rejects. Pure and
deterministic; no model here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from combee_core.playbook.conflict import split_clauses

MAX_TOOL_WORDS = 5
"""Words read of the instrument phrase ("argon2 or bcrypt digests"): a name or a short list of alternatives."""

_MARKER = re.compile(r"\b(with|using|via|as)\s+")
_NOT_AN_INSTRUMENT = re.compile(r"\b(such|soon|well|long|far|much|many|same)$")
"""Words before "as" that make no instrument of what follows ("such as X" gives examples)."""
_AFTER_AS = re.compile(r"(soon|well|long|far|much|many|if|though|a result|needed|usual|before|is|it)\b")
_NEGATED = re.compile(r"\b(not|never|don't|dont|cannot|can't|mustn't|shouldn't|avoid|nor|no longer)\b")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'_.+-]*[A-Za-z0-9+]|[A-Za-z0-9]|[,;:.!?()]")
_STOP = frozenset(
    "to for on in of so at by with without from into than when whenever before after until unless if while because"
    " since then but is are be been must should can could will would may might which who whose that it them they"
    " this these those".split())
_DETERMINERS = frozenset("a an the any every each some all its their your our".split())
_LISTING = frozenset({"or", "and", ","})
_AUXILIARIES = frozenset("is are was were be been being must should shall will would can could may might need needs"
                         " has have had get gets got".split())
_ADVERBS = frozenset("always please only also still just".split())


@dataclass(frozen=True, slots=True)
class Tool:
    """A clause's action (its words before the marker, negations dropped) and the names of what it is done with;
    ``rejected`` when the clause forbids it."""

    action: str
    names: frozenset[str]
    rejected: bool = False
    thing: str = ""
    """What the action is done on: the action's words after its verb ("hash passwords" -> "passwords"), or before
    its auxiliary in a passive or modal clause ("session tokens should be signed" -> "session tokens")."""


def is_name(word: str) -> bool:
    """Whether ``word`` (as written) names a tool: a digit in it, or a capital after its first letter."""
    return any(ch.isdigit() for ch in word) or any(ch.isupper() for ch in word[1:])


def same_name(a: str, b: str) -> bool:
    """Whether two names name one tool: their letters and digits alike, or one's a prefix of the other's ("UTF-8" /
    "utf8", "argon2" / "argon2id", "SHA-1" / "sha1"; "AES-128" / "AES-256" are two)."""
    key_a, key_b = re.sub(r"[^a-z0-9]", "", a.lower()), re.sub(r"[^a-z0-9]", "", b.lower())
    return key_a.startswith(key_b) or key_b.startswith(key_a)


def tools_of(text: str) -> tuple[Tool, ...]:
    """The named tools ``text`` does its actions with, clause by clause, in order."""
    found: list[Tool] = []
    for clause in split_clauses(text.replace("\u2019", "'")):
        lowered = clause.lower()
        for match in _MARKER.finditer(clause):
            before = lowered[:match.start()].strip()
            if not before or _NOT_AN_INSTRUMENT.search(before) or (
                    match.group(1).lower() == "as" and _AFTER_AS.match(lowered[match.end():])):
                continue
            names = _names(clause[match.end():])
            if names:
                rejected = _NEGATED.search(before) is not None or lowered.startswith("not ")
                action = [w for w in before.split() if not _NEGATED.fullmatch(w) and w not in _ADVERBS]
                found.append(Tool(" ".join(action), names, rejected, _object(action)))
            break  # the first instrument of a clause is its action's; later ones belong to the instrument
    return tuple(found)


def _object(action: list[str]) -> str:
    auxiliary = next((i for i, w in enumerate(action) if w in _AUXILIARIES), None)
    words = action[:auxiliary] if auxiliary else action[1:]
    return " ".join(w for w in words if w not in _DETERMINERS)


def _names(rest: str) -> frozenset[str]:
    names: set[str] = set()
    words = 0
    for token in _TOKEN.findall(rest):
        lowered = token.lower()
        if lowered in _LISTING:
            continue
        if token in ";:.!?()" or lowered in _STOP:
            break
        if lowered in _DETERMINERS and not words:
            continue
        words += 1
        if is_name(token) and not token.isdigit():  # a bare number counts (the conflict check's quantities)
            names.add(lowered)
        if words == MAX_TOOL_WORDS:
            break
    return frozenset(names)


def tool_swap(a: tuple[Tool, ...], b: tuple[Tool, ...], alike: Callable[[str, str], bool]) -> str | None:
    """Why ``a`` and ``b`` do one action on one thing (``alike`` says two phrases are one: the actions and the things
    they are done on, each) with different named tools, or with a tool one asks and the other rejects; None when
    they name one tool or none. Another thing is another lesson ("Encrypt backups with AES-256" / "Encrypt emails
    with AES-128")."""
    for mine in a:
        for theirs in b:
            if mine.rejected and theirs.rejected:
                continue
            shared = any(same_name(x, y) for x in mine.names for y in theirs.names)
            if mine.rejected != theirs.rejected:
                swapped = bool(shared)  # "hash with MD5" / "never hash with MD5"
            else:
                swapped = not shared  # "hash with MD5" / "hash with argon2"
            if swapped and mine.thing and theirs.thing and alike(mine.thing, theirs.thing) and alike(
                    mine.action, theirs.action):
                how = "asked and rejected" if mine.rejected != theirs.rejected else "swapped"
                return (f"instrument {how}: {_listed(mine)} vs {_listed(theirs)} for one action ({mine.action!r} / "
                        f"{theirs.action!r})")
    return None


def _listed(tool: Tool) -> str:
    return ("not " if tool.rejected else "") + "/".join(sorted(tool.names))
