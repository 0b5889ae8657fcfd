"""The project's own detectors (no Kafka, no library): Unicode-aware patterns for what has a shape, as a layer next to
the maintained secret detector (``combee_core.ingest.secret_library``) for what it misses (docs/redaction.md).

A :class:`Detector` finds spans in a text; each span is replaced by ``[NAME]``. A pattern's named groups, when one
matched, give the span (the label of ``DB_PASSWORD=...`` is kept, only the value is replaced).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Detector:
    """One kind of data: matches of ``pattern`` (its first named group that matched, when it has one) that pass
    ``check`` are replaced by ``[name]``."""

    name: str
    pattern: re.Pattern[str]
    check: Callable[[str], bool] | None = None

    @property
    def placeholder(self) -> str:
        return f"[{self.name}]"

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) of every match to replace, in order, not overlapping."""
        spans = []
        for match in self.pattern.finditer(text):
            group = next((name for name, value in match.groupdict().items() if value), None)
            start, end = match.span(group) if group is not None else match.span()
            if start < end and (self.check is None or self.check(text[start:end])):
                spans.append((start, end))
        return spans


_PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]{0,31}\]")


def is_placeholder(text: str) -> bool:
    """Whether ``text`` is a placeholder a detector put in (``[SECRET]``): never replaced again."""
    return _PLACEHOLDER.fullmatch(text) is not None


def not_placeholder(text: str) -> bool:
    return not is_placeholder(text)


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a string of digits (what every payment card number passes)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[0689]|6(?:011|5|4[4-9]|2))")


def card_number(text: str) -> bool:
    """13 to 19 digits (any script's), a card network's prefix, and the Luhn check."""
    digits = "".join(str(int(char)) for char in text if char.isdecimal())
    return 13 <= len(digits) <= 19 and bool(_CARD_PREFIX.match(digits)) and luhn_valid(digits)


def phone_number(text: str) -> bool:
    return 7 <= sum(char.isdecimal() for char in text) <= 15


# -- secrets after a label -----------------------------------------------------------------------------------------
# A label is a word that ends with a secret keyword, its parts joined by _ - . or nothing (DB_PASSWORD, MY_API_KEY,
# AWS_SECRET_ACCESS_KEY, db.password, x-api-key, PGPASSWORD, clientSecret); short keywords (pass, pwd, pin) only as a
# whole part. "max_tokens", "tokenizer", "passenger" are not labels (the keyword does not end the word).
_LONG_KEYWORDS = (
    r"password|passwd|passphrase|passcode|secret|token|api[_.-]?key|credentials?|"
    r"(?:access|secret|private|account|shared[_.-]?access|client|master|encryption|signing|service|app|auth|"
    r"db|database|license|subscription|storage|session)[_.-]?key|session[_.-]?id|signature|"
    r"passwort|kennwort|contrase[ñn]a|senha|parola|wachtwoord|has[łl]o|mot[_ .-]de[_ .-]passe|"
    r"пароль|密码|密碼|パスワード|비밀번호"
)
_SHORT_KEYWORDS = r"pass|pwd|pin|sig"
_LABEL = (
    rf"(?<![\w.-])(?:(?i:[\w.-]*?(?:{_LONG_KEYWORDS})|(?:[\w.-]*[_.-])?(?:{_SHORT_KEYWORDS}))"
    r"|[\w.-]*?[A-Za-z0-9](?:Pwd|Pass|Pin|Sig))(?![\w])"  # camelCase: dbPwd, DbPass, XPwd
)
_QUOTED = (  # JSON inside a string escapes its quotes: {\"password\": \"...\"}
    r"\\?\"(?P<dq>(?:[^\"\\\r\n]|\\(?!\"))+)\\?\"|\\?'(?P<sq>(?:[^'\\\r\n]|\\(?!'))+)\\?'"
)
_BARE = r"(?P<bare>[^\s\"',;&<>()\[\]{}][^\s\"',;&]{2,299})"
_CANDIDATE = re.compile(  # any word, then a separator and a value: the word is checked afterwards (fast)
    rf"(?<![\w.-])(?P<label>[\w.-]{{1,80}})(?:\\?[\"'])?(?i:[^\S\r\n]+(?:is|was|ist|war|es|est|era|é))?"
    rf"[^\S\r\n]*(?::=|=>|[:=])[^\S\r\n]*(?:{_QUOTED}|{_BARE})"
)
_SECRET_LABEL = re.compile(_LABEL)
_FLAG = rf"(?<![\w-])--?(?i:[\w.-]*?(?:{_LONG_KEYWORDS}|{_SHORT_KEYWORDS}))[= ](?P<flag>[^\s\"'-][^\s\"']{{2,299}})"
_SAID = rf"(?i:\bmy\s+(?:{_LONG_KEYWORDS}|pin)\s+(?:is|was|:)\s+)(?P<said>[^\s\"',;]{{4,200}})"
_HEADER = (
    r"(?i:\b(?:proxy-)?authori[sz]ation[\"']?[^\S\r\n]*[:=][^\S\r\n]*[\"']?(?:[a-z][\w-]*[^\S\r\n]+)?)"
    r"(?P<auth>[^\s\"',;]{4,})"
    r"|(?i:\b(?:set-)?cookie[\"']?[^\S\r\n]*:[^\S\r\n]*)(?P<cookie>[^\r\n\"]{4,})"
    r"|(?i:\bbearer\s+)(?P<bearer>[A-Za-z0-9._~+/-]{12,}=*)"
)
_URL_PASSWORD = r"\b[a-z][a-z0-9+.-]*://[^\s:/@]*:(?P<url>[^\s@/]+)@"
_PRIVATE_KEY = (
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|\Z)"
)
_SHAPES = "|".join((
    r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}",
    r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{16,}", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{12,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}", r"\bgithub_pat_[A-Za-z0-9_]{30,}", r"\bglpat-[A-Za-z0-9_-]{20,}",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}", r"\bxapp-[A-Za-z0-9-]{10,}", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_-]{35}", r"\bhf_[A-Za-z0-9]{30,}", r"\bnpm_[A-Za-z0-9]{36}\b", r"\bpypi-[A-Za-z0-9_-]{50,}",
    r"\bya29\.[0-9A-Za-z_-]{20,}", r"\bSG\.[\w-]{16,}\.[\w-]{16,}", r"\bSK[0-9a-f]{32}\b",
))
SECRET_PATTERNS = (_PRIVATE_KEY, _FLAG, _SAID, _HEADER, _URL_PASSWORD, _SHAPES)
"""Applied one by one (one alternation of all of them is twice as slow)."""


@dataclass(frozen=True)
class LabelledValues:
    """The value after a secret label (``DB_PASSWORD=...``, ``"db_password": "..."``, ``password: ...``): every
    ``word <separator> value`` is found, then the word checked; a word that is not a secret label gives way to the
    next word (so ``"note": "password=x"`` still finds ``password``)."""

    name: str = "SECRET"

    def spans(self, text: str) -> list[tuple[int, int]]:
        spans, position = [], 0
        while (match := _CANDIDATE.search(text, position)) is not None:
            if not _SECRET_LABEL.fullmatch(match.group("label")):
                position = match.end("label")
                continue
            group = next(name for name in ("dq", "sq", "bare") if match.group(name))
            if not is_placeholder(match.group(group)):
                spans.append(match.span(group))
            position = match.end()
        return spans


@dataclass(frozen=True)
class AnyOf:
    """Several detectors under one name: their spans, overlapping ones merged."""

    name: str
    parts: tuple[Detector | LabelledValues, ...]

    def spans(self, text: str) -> list[tuple[int, int]]:
        merged: list[tuple[int, int]] = []
        for start, end in sorted(span for part in self.parts for span in part.spans(text)):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged

# -- personal data -------------------------------------------------------------------------------------------------
# \w is Unicode here: josé@correo.es, user@münchen.de, 山田@例え.jp; a top-level domain is letters (any script) or
# punycode.
_EMAIL = (
    r"(?<![\w.%+'-])[\w%+'-](?:[\w.%+'-]{0,62}[\w%+'-])?@"
    r"(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+(?:[^\W\d_]{2,63}|xn--[a-z0-9-]{2,59})(?![\w-])"
)
# Digits in groups joined by up to three spaces (any: no-break, thin, figure), dashes, dots or slashes, standing
# alone: not inside a longer run of letters and digits (a hex trace id or digest holds a Luhn-valid, card-prefixed run
# of 16 digits about once in 2,000; presidio's card recognizer asks for word boundaries too).
_CARD = r"(?<![^\W_])(?<!-)\d(?:(?:[^\S\r\n]|[/._-]){0,3}\d){12,18}(?![^\W_])"
_PHONE = (
    r"(?<![\w+])\+\d{1,3}(?:(?:[^\S\r\n]|[.-])?\(?\d{1,4}\)?){2,5}(?![\w-])"
    r"|(?<![\w+.-])\(?0?\d{2,4}\)?(?:[^\S\r\n]|[.-])\d{3,4}(?:[^\S\r\n]|[.-])\d{4}(?![\w-])"
)

OWN_DETECTORS: dict[str, Detector | AnyOf] = {
    "secret": AnyOf("SECRET", (LabelledValues(), *(Detector("SECRET", re.compile(pattern), not_placeholder)
                                                   for pattern in SECRET_PATTERNS))),
    "email": Detector("EMAIL", re.compile(_EMAIL)),
    "card": Detector("CARD", re.compile(_CARD), card_number),
    "phone": Detector("PHONE", re.compile(_PHONE), phone_number),
}
"""The project's own detectors by setting name, in the order they apply."""
