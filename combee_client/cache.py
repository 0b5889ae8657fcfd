"""The client's cache file: the last served version it saw, so an agent started while the broker is away still runs
the playbook it ran before (one JSON file per playbook, written atomically); with ancestors
(``COMBEE_PLAYBOOK_PARENTS``), their served versions too, for the composed view."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from combee_core.models import PlaybookVersion
from combee_core.models.base import SCHEMA_VERSION, CombeeModel, PlaybookId, Timestamp

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "COMBEE_CLIENT_CACHE_DIR"


class InheritedVersion(CombeeModel):
    """An ancestor's served version (None: none yet), kept with its child's."""

    playbook_id: PlaybookId
    served: PlaybookVersion | None


class ClientCache(CombeeModel):
    """What the cache file holds: the served version (None: the empty version 0) and where it was served."""

    schema_version: Literal[1] = SCHEMA_VERSION
    playbook_id: PlaybookId
    topic_prefix: str
    promotion: bool
    served: PlaybookVersion | None
    saved_at: Timestamp
    inherited: list[InheritedVersion] = Field(
        default_factory=list, description="Each ancestor and its served version, nearest first (no parent: none).")
    reviewed: bool = Field(default=False, description="The versions are the reviewed views (review mode was on for "
                           "the playbook or an ancestor): a cache of the other kind is not read back.")


def default_cache_path(topic_prefix: str, playbook_id: str) -> Path:
    """``$COMBEE_CLIENT_CACHE_DIR`` (else ``$XDG_CACHE_HOME/combee``, else ``~/.cache/combee``)
    ``/<prefix><playbook_id>.json``."""
    base = os.environ.get(CACHE_DIR_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "combee")
    return Path(base) / f"{topic_prefix}{playbook_id}.json"


def load_cache(path: Path, playbook_id: str, topic_prefix: str, promotion: bool,
               ancestors: tuple[str, ...] = (), reviewed: bool = False) -> ClientCache | None:
    """The cache at ``path`` if it is this playbook's, on these topics, with the same promotion setting, ancestors
    and review mode; None when there is none or it is another's (logged; an unreadable file too)."""
    try:
        cache = ClientCache.from_json_bytes(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError) as error:
        log.warning("combee client: ignoring the cache file %s: %s", path, str(error).splitlines()[0])
        return None
    if (cache.playbook_id, cache.topic_prefix, cache.promotion) != (playbook_id, topic_prefix, promotion):
        log.warning("combee client: ignoring the cache file %s: it is for %s%s (promotion %s)", path,
                    cache.topic_prefix, cache.playbook_id, "on" if cache.promotion else "off")
        return None
    if tuple(item.playbook_id for item in cache.inherited) != ancestors:
        log.warning("combee client: ignoring the cache file %s: its parents (%s) are not %s's now (%s)", path,
                    ", ".join(item.playbook_id for item in cache.inherited) or "none", playbook_id,
                    ", ".join(ancestors) or "none")
        return None
    if cache.reviewed != reviewed:  # an unreviewed cache would serve what review withholds
        log.warning("combee client: ignoring the cache file %s: it was written with review mode %s", path,
                    "on" if cache.reviewed else "off")
        return None
    return cache


def save_cache(path: Path, cache: ClientCache) -> None:
    """Write ``cache`` to ``path`` atomically (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(cache.to_json_bytes())
    os.replace(temporary, path)


def cache_of(playbook_id: str, topic_prefix: str, promotion: bool, served: PlaybookVersion | None,
             inherited: Sequence[tuple[str, PlaybookVersion | None]] = (), reviewed: bool = False) -> ClientCache:
    return ClientCache(playbook_id=playbook_id, topic_prefix=topic_prefix, promotion=promotion, served=served,
                       saved_at=datetime.now(timezone.utc), reviewed=reviewed,
                       inherited=[InheritedVersion(playbook_id=scope, served=version) for scope, version in inherited])
