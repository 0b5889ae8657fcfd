"""The maintained secret detector: Yelp's detect-secrets plugins (its keyword detector, its high-entropy string
detectors and its detectors of known token shapes), run on each line of a text, as a :class:`LibraryDetector` that
finds the spans of what they report (docs/redaction.md, "Why this library").

detect-secrets reports a secret's value, not where it is: every occurrence of a reported value in the text is
replaced. Its plugins are chosen by measurement (``bench/redaction_detectors.py``): the public-IP detector is left
out (addresses are not secrets, and traces are full of them), and so are the private-key detector (it reports only
the ``BEGIN ... PRIVATE KEY`` line; the project's own rule replaces the whole block) and the basic-auth one (see
:data:`PLUGINS`); its keyword detector runs with quotes required (unquoted, it takes the rest of the line).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from combee_core.ingest.detectors import is_placeholder

PLUGINS = (
    "KeywordDetector", "Base64HighEntropyString", "HexHighEntropyString", "ArtifactoryDetector", "AWSKeyDetector",
    "AzureStorageKeyDetector", "CloudantDetector", "DiscordBotTokenDetector",
    "GitHubTokenDetector", "GitLabTokenDetector", "IbmCloudIamDetector", "IbmCosHmacDetector", "JwtTokenDetector",
    "MailchimpDetector", "NpmDetector", "OpenAIDetector", "PypiTokenDetector", "SendGridDetector", "SlackDetector",
    "SoftlayerDetector", "SquareOAuthDetector", "StripeDetector", "TelegramBotTokenDetector", "TwilioKeyDetector",
)
"""detect-secrets' plugins applied, by class name: all of 1.5.0's but ``IPPublicDetector``, ``PrivateKeyDetector``
and ``BasicAuthDetector`` (its match is ``://user:password@host``: the project's URL rule replaces only the
password, an empty user too)."""
MIN_VALUE_CHARS = 4
"""A reported value shorter than this is not replaced (a keyword's value such as ``no`` or ``1``)."""
_NOT_SECRET = re.compile(r"^(?:true|false|null|none|yes|no|required|optional|redacted|\*+|x+)$", re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def _plugin_classes() -> dict[str, type[Any]]:
    # detect-secrets (with the requests it imports) takes a quarter of a second to import: only once a text is
    # scanned, not in every process that imports the models (the command line, a worker's start)
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: list[type[Any]] = list(get_mapping_from_secret_type_to_class().values())
    return {cls.__name__: cls for cls in classes}


@dataclass(frozen=True)
class LibraryDetector:
    """detect-secrets' plugins named in ``plugins``, as a detector of ``[name]`` spans."""

    name: str = "SECRET"
    plugins: tuple[str, ...] = PLUGINS
    _instances: list[Any] = field(default_factory=list, compare=False, repr=False)

    def _loaded(self) -> list[Any]:
        if not self._instances:
            classes = _plugin_classes()
            self._instances.extend(classes[plugin]() for plugin in self.plugins)
        return self._instances

    def _value_spans(self, text: str, value: str) -> list[tuple[int, int]]:
        if len(value) < MIN_VALUE_CHARS or is_placeholder(value) or _NOT_SECRET.match(value):
            return []
        spans, start = [], text.find(value)
        while start >= 0:
            spans.append((start, start + len(value)))
            start = text.find(value, start + len(value))
        return spans

    def _plugin_spans(self, plugin: Any, text: str) -> list[tuple[int, int]]:
        denylist = getattr(plugin, "denylist", None)
        if denylist is not None:  # a token-shape detector: its patterns' whole matches, to the token's end
            return [(match.start(), _token_end(text, match.end())) for regex in denylist
                    for match in regex.finditer(text) if match.end() > match.start()
                    and not is_placeholder(match.group())]
        values: set[str] = set()
        limit = getattr(plugin, "entropy_limit", None)
        for line in text.splitlines():
            if '"' not in line and "'" not in line and "`" not in line:  # both read quoted strings only
                continue
            if limit is not None:  # a high-entropy detector: quoted strings over its limit
                values.update(v for v in plugin.analyze_string(line) if plugin.calculate_shannon_entropy(v) > limit)
            elif _keyword_hint().search(line):  # the keyword detector (quotes required), where one of its words is
                values.update(plugin.analyze_string(line, denylist_regex_to_group=_keyword_regexes()))
        return [span for value in values for span in self._value_spans(text, value)]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The spans every plugin reports, overlapping ones merged, in order."""
        merged: list[tuple[int, int]] = []
        for start, end in sorted(span for plugin in self._loaded() for span in self._plugin_spans(plugin, text)):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged


_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_+/=.-]*(?<!\.)")


def _token_end(text: str, end: int) -> int:
    """Where the token a match ends in ends (some of the library's patterns end lazily: a JWT's signature is not in
    its match), a final dot left to the sentence."""
    tail = _TOKEN_TAIL.match(text, end)
    return tail.end() if tail else end


@functools.lru_cache(maxsize=1)
def _keyword_hint() -> re.Pattern[str]:
    """One of the keyword detector's words, anywhere in a line."""
    from detect_secrets.plugins import keyword

    return re.compile("|".join(keyword.DENYLIST), re.IGNORECASE)


def _keyword_regexes() -> dict[Any, int]:
    """The keyword detector's patterns with quotes required (as it reads code)."""
    from detect_secrets.plugins import keyword

    return keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP


def library_detectors() -> tuple[LibraryDetector, ...]:
    """The library's detectors as the built-in ``secret`` detector applies them (first, before the own rules)."""
    return (LibraryDetector(),)
