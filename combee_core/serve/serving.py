"""Serving the served playbook versions to agents (no Kafka, no HTTP): what ``combee serve`` decides.

Which version is served is not decided here (``streams.topology.follower.PlaybookFollower.served``, with
``combee_core.promote.promotion`` and ``combee_core.guard.rule``); this module holds what follows from it: the HTTP
entity tag of a served version, whether a request's ``If-None-Match`` still matches, which playbooks changed their
served version (what to notify), the versions kept for ``GET .../versions/{v}``, the context for a task (the top ``k``
entries within a token budget, ``combee_core.playbook.retrieval``), and the binding rule (loopback, else a token).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from combee_core.errors import CombeeError
from combee_core.models import PlaybookVersion
from combee_core.playbook import DEFAULT_TOP_K, Playbook, render_for_task, render_playbook

NOTHING_SERVED_ETAG = '"0"'
"""The entity tag while a playbook has no served version (version 0, the empty playbook)."""


class ServeConfigError(CombeeError, ValueError):
    """``combee serve`` cannot start as configured (the message says which setting)."""


class VersionNotKept(CombeeError, LookupError):
    """A version older than the versions ``combee serve`` keeps (the message says how many it keeps)."""


# ------------------------------------------------------------------------------------------- entity tags


def etag(version: PlaybookVersion | None) -> str:
    """The strong entity tag of a served version: its number and content hash (a rollback to an older version is a
    new tag; the same version is always the same tag)."""
    if version is None:
        return NOTHING_SERVED_ETAG
    return f'"{version.version}-{version.content_hash[:20]}"'


def etag_matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``tag`` (``*``, a list, weak ``W/`` tags compared weakly, as
    RFC 9110 says for ``If-None-Match``)."""
    if not if_none_match:
        return False
    candidates = [part.strip() for part in if_none_match.split(",")]
    return any(c == "*" or c.removeprefix("W/") == tag for c in candidates)


def keep_waiting(if_none_match: str | None, tag: str) -> bool:
    """A long-poll goes on waiting while the served version is still the one the client has, or, without
    ``If-None-Match``, while nothing is served yet."""
    if if_none_match:
        return etag_matches(if_none_match, tag)
    return tag == NOTHING_SERVED_ETAG


# ------------------------------------------------------------------------------------ served versions


@dataclass
class ServedTable:
    """The served version of each playbook as last seen, and each version seen (the newest ``keep`` per playbook,
    plus the served one): :meth:`update` says whether the served version changed, i.e. whether to notify."""

    keep: int = 256
    served: dict[str, PlaybookVersion | None] = field(default_factory=dict)
    versions: dict[str, dict[int, PlaybookVersion]] = field(default_factory=dict)
    newest: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.keep < 1:
            raise ServeConfigError(f"COMBEE_SERVE_KEEP_VERSIONS must be at least 1, got {self.keep}")

    def record(self, version: PlaybookVersion) -> None:
        """A version read from the playbook topic (counted by the reading rule)."""
        kept = self.versions.setdefault(version.playbook_id, {})
        kept[version.version] = version
        self.newest[version.playbook_id] = max(self.newest.get(version.playbook_id, 0), version.version)
        self._trim(version.playbook_id)

    def update(self, playbook_id: str, served: PlaybookVersion | None) -> bool:
        """Take the playbook's served version now; True when it differs from the one before (a newly served
        version: a new one, a promotion, a rollback), False when it is the same."""
        before = self.served.get(playbook_id)
        self.served[playbook_id] = served
        if served is not None:
            self.versions.setdefault(playbook_id, {}).setdefault(served.version, served)
        changed = etag(before) != etag(served)
        if changed:
            self._trim(playbook_id)
        return changed

    def version(self, playbook_id: str, number: int) -> PlaybookVersion | None:
        """A version seen (None: never seen); :class:`VersionNotKept` when it was dropped as too old."""
        found = self.versions.get(playbook_id, {}).get(number)
        if found is None and 1 <= number <= self.newest.get(playbook_id, 0) - self.keep:
            raise VersionNotKept(f"{playbook_id} v{number} is older than the {self.keep} newest versions this server "
                                 "keeps (COMBEE_SERVE_KEEP_VERSIONS); read it from the playbook topic")
        return found

    def playbook_ids(self) -> list[str]:
        return sorted(set(self.served) | set(self.versions))

    def _trim(self, playbook_id: str) -> None:
        kept = self.versions.get(playbook_id, {})
        served = self.served.get(playbook_id)
        floor = self.newest.get(playbook_id, 0) - self.keep
        for number in [n for n in kept if n <= floor and (served is None or n != served.version)]:
            del kept[number]


# ------------------------------------------------------------------------------------------- the wire


class ServeModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlaybookSummary(ServeModel):
    """One playbook in ``GET /playbooks``: its served version (0: none yet) and the newest version seen; with a
    parent (``COMBEE_PLAYBOOK_PARENTS``) it is listed even before a version of its own, and its ``etag`` is that of
    the composed view ``GET /playbooks/{id}`` answers."""

    playbook_id: str
    parent: str | None = None
    served_version: int = Field(ge=0)
    newest_version: int = Field(ge=0)
    etag: str
    content_hash: str | None
    entries: int = Field(ge=0)
    published_at: datetime | None


def summarize(table: ServedTable, playbook_id: str) -> PlaybookSummary:
    served = table.served.get(playbook_id)
    return PlaybookSummary(playbook_id=playbook_id, served_version=served.version if served else 0,
                           newest_version=table.newest.get(playbook_id, 0), etag=etag(served),
                           content_hash=served.content_hash if served else None,
                           entries=len(served.entries) if served else 0,
                           published_at=served.published_at if served else None)


class ContextQuery(ServeModel):
    """What a task asks for: the ``k`` most relevant entries of the served version, within ``token_budget``."""

    playbook_id: str
    task: str = Field(min_length=1, description="The task's text (what the agent is about to do).")
    k: int = Field(default=DEFAULT_TOP_K, ge=0, description="Most entries to return.")
    token_budget: int | None = Field(default=None, ge=0, description="Most tokens of rendered text (none: no limit).")


class TaskContext(ServeModel):
    """The context for a task: rendered text of the chosen entries and which entries they are."""

    playbook_id: str
    version: int = Field(ge=0, description="The served version the context was taken from (0: none served yet).")
    etag: str
    task: str
    k: int
    token_budget: int | None
    text: str
    tokens: int
    included_entry_ids: list[str]


def context_for_task(served: PlaybookVersion | None, query: ContextQuery) -> TaskContext:
    """The context for ``query.task`` from the served version (empty before the first)."""
    rendered = render_for_task(as_playbook(query.playbook_id, served), query.task, k=query.k,
                               token_budget=query.token_budget)
    return TaskContext(playbook_id=query.playbook_id, version=served.version if served else 0, etag=etag(served),
                       task=query.task, k=query.k, token_budget=query.token_budget, text=rendered.text,
                       tokens=rendered.tokens, included_entry_ids=list(rendered.included_entry_ids))


def as_playbook(playbook_id: str, served: PlaybookVersion | None) -> Playbook:
    if served is None:
        return Playbook.empty(playbook_id)
    return Playbook.from_entries(playbook_id, served.version, served.entries, served.next_entry_number)


def render_served(playbook_id: str, served: PlaybookVersion | None) -> str:
    """The whole served version as prompt text under a one-line header (what an MCP resource reads)."""
    if served is None:
        return f"# playbook {playbook_id}: no version served yet\n"
    body = render_playbook(as_playbook(playbook_id, served)).text
    return f"# playbook {playbook_id} v{served.version} ({len(served.entries)} entries)\n\n{body}\n"


# ------------------------------------------------------------------------------------------ exposure


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(hosts: Iterable[str], token: str | None, *, keys: bool = False) -> None:
    """Refuse to bind beyond loopback without a token or access keys (one line naming the settings)."""
    exposed = [host for host in hosts if not is_loopback(host)]
    if exposed and not token and not keys:
        raise ServeConfigError(f"refusing to serve on {exposed[0]} (beyond loopback) without a token: set "
                               "COMBEE_ACCESS_KEYS (keys scoped to playbooks) or COMBEE_SERVE_TOKEN (clients send "
                               "'Authorization: Bearer <token>')")


def authorized(authorization: str | None, token: str | None) -> bool:
    """Whether a request's ``Authorization`` header carries the bearer token (always, when there is none)."""
    if not token:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def parse_wait(value: str | None, max_wait_s: float) -> float:
    """The ``?wait=`` seconds of a long-poll (0 when absent); a ValueError over ``max_wait_s`` or not a number."""
    if value is None or value == "":
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"wait must be a number of seconds, got {value!r}") from None
    if not 0 <= seconds <= max_wait_s:
        raise ValueError(f"wait must be between 0 and {max_wait_s:g} s (COMBEE_SERVE_MAX_WAIT_S), got {value}")
    return seconds
