"""Access keys scoped to playbooks (pure): who may read which playbook from ``combee serve`` (HTTP and MCP) and
write traces of which playbook into ``combee otlp-receiver``, as Langfuse's per-project keys do.

A key is configured as data, one line each (``COMBEE_ACCESS_KEYS``, lines or ``;``-separated, and/or the file
``COMBEE_ACCESS_KEYS_FILE``)::

    # name           digest of the secret      what it may do
    tenant-a-agents  sha256:9f86d08...         read=tenant-a
    tenant-a-otel    sha256:2c26b46...         write=tenant-a
    ops              sha256:fcde2b2...         read=* write=*

Only the SHA-256 digest of a secret is stored (``combee key new`` makes a secret and prints its line); a client sends
the secret as ``Authorization: Bearer <secret>``. ``read=`` and ``write=`` take playbook ids, comma-separated, or
``*`` (every playbook). Reading a playbook that has a parent (``COMBEE_PLAYBOOK_PARENTS``) is reading its composed
view, the parent's entries included; reading the parent itself needs the parent's id in ``read=``.

The single ``COMBEE_SERVE_TOKEN`` keeps working for ``combee serve``: it reads every playbook (a ``read=*`` key).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from combee_core.errors import CombeeError

EVERY = "*"
KEY_PREFIX = "cmb_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_PLAYBOOK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


class AccessKeyError(CombeeError, ValueError):
    """A key line that cannot be used (the message names the line)."""


def digest(secret: str) -> str:
    """``sha256:<hex>`` of a secret: what a key line stores."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh secret (256 random bits), prefixed so a leaked one is recognizable."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Grant:
    """What one caller may do: the playbooks it may read and write (``*``: every one)."""

    name: str
    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()

    def may_read(self, playbook_id: str) -> bool:
        return EVERY in self.read or playbook_id in self.read

    def may_write(self, playbook_id: str) -> bool:
        return EVERY in self.write or playbook_id in self.write

    def readable(self, playbook_ids: Iterable[str]) -> list[str]:
        """The ids this caller may read, in order (what a list or an error message may name)."""
        return [p for p in playbook_ids if self.may_read(p)]

    @property
    def writes_everywhere(self) -> bool:
        return EVERY in self.write

    def key_line(self, secret_digest: str) -> str:
        scopes = " ".join(f"{what}={','.join(sorted(ids))}" for what, ids in (("read", self.read),
                                                                               ("write", self.write)) if ids)
        return f"{self.name} {secret_digest} {scopes}"


OPEN = Grant("anyone", frozenset({EVERY}), frozenset({EVERY}))
"""No token and no key configured (a loopback door): everything, as before keys existed."""

SERVE_TOKEN = Grant("COMBEE_SERVE_TOKEN", frozenset({EVERY}))
"""The single global serve token: reads every playbook (kept for compatibility)."""


def parse_key_line(line: str, where: str) -> tuple[str, Grant]:
    """``(digest, grant)`` of one key line; :class:`AccessKeyError` naming ``where`` and the problem."""
    parts = line.split()
    if len(parts) < 3:
        raise AccessKeyError(f"{where}: a key line is 'NAME sha256:HEX read=... write=...', got {line[:60]!r}")
    name, secret_digest, *scopes = parts
    if not _NAME.match(name):
        raise AccessKeyError(f"{where}: {name!r} is not a key name (letters, digits, . _ @ -)")
    if not _DIGEST.match(secret_digest):
        raise AccessKeyError(f"{where}: key {name}: the secret is stored as sha256:<64 hex digits> (combee key new "
                             "prints it); never the secret itself")
    granted: dict[str, set[str]] = {"read": set(), "write": set()}
    for scope in scopes:
        what, _, ids = scope.partition("=")
        if what not in granted or not ids:
            raise AccessKeyError(f"{where}: key {name}: {scope!r} is not read=<playbooks> or write=<playbooks>")
        for playbook_id in ids.split(","):
            if playbook_id != EVERY and not _PLAYBOOK.match(playbook_id):
                raise AccessKeyError(f"{where}: key {name}: {playbook_id!r} is not a playbook id or *")
            granted[what].add(playbook_id)
    return secret_digest, Grant(name, frozenset(granted["read"]), frozenset(granted["write"]))


@dataclass(frozen=True)
class KeyRing:
    """The configured keys and the global token; :meth:`grant` says what a request's ``Authorization`` may do."""

    keys: dict[str, Grant] = field(default_factory=dict)
    """Per stored digest, its grant."""
    token: str | None = None
    """The global token (``COMBEE_SERVE_TOKEN`` for ``combee serve``): an all-playbooks read key."""
    token_grant: Grant = SERVE_TOKEN

    @classmethod
    def parse(cls, text: str, *, where: str = "COMBEE_ACCESS_KEYS", token: str | None = None) -> KeyRing:
        keys: dict[str, Grant] = {}
        names: set[str] = set()
        for number, raw in enumerate(re.split(r"[\n;]", text), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            secret_digest, grant = parse_key_line(line, f"{where} line {number}")
            if secret_digest in keys or grant.name in names:
                raise AccessKeyError(f"{where} line {number}: key {grant.name} repeats a name or a secret")
            keys[secret_digest] = grant
            names.add(grant.name)
        return cls(keys, token or None)

    @classmethod
    def load(cls, inline: str, path: str | None, token: str | None = None) -> KeyRing:
        """The keys of ``COMBEE_ACCESS_KEYS`` and of the file ``COMBEE_ACCESS_KEYS_FILE`` (if set)."""
        ring = cls.parse(inline, token=token)
        if path:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as error:
                raise AccessKeyError(f"COMBEE_ACCESS_KEYS_FILE: cannot read {path}: {error.strerror}") from error
            more = cls.parse(text, where=path)
            clash = {g.name for g in ring.keys.values()} & {g.name for g in more.keys.values()}
            if clash or set(ring.keys) & set(more.keys):
                raise AccessKeyError(f"{path}: key {sorted(clash)[0] if clash else '?'} is also in "
                                     "COMBEE_ACCESS_KEYS")
            ring = cls({**ring.keys, **more.keys}, ring.token)
        return ring

    @property
    def required(self) -> bool:
        """Whether a request must carry a token or a key (one is configured)."""
        return bool(self.keys) or bool(self.token)

    def writers(self) -> list[Grant]:
        return [grant for grant in self.keys.values() if grant.write]

    def grant(self, authorization: str | None) -> Grant | None:
        """What the bearer of this ``Authorization`` header may do (:data:`OPEN` when nothing is configured; None:
        no valid token or key, answer 401)."""
        if not self.required:
            return OPEN
        scheme, _, given = (authorization or "").partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return None
        if self.token and hmac.compare_digest(given.encode(), self.token.encode()):
            return self.token_grant
        return self.keys.get(digest(given))
