"""Playbooks in and out of a run: publish a seeded version (``combee playbook import``), read one version back
(``combee playbook export``). Both follow the reading rule (``docs/protocol.md``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from combee_core.connection import PLAINTEXT, KafkaConnection
from combee_core.errors import CombeeError
from combee_core.log_order import valid_manifests, valid_versions
from combee_core.models import BatchManifest, PlaybookEntry, PlaybookVersion, utc_now
from combee_core.runs.seed import SeededVersion, is_import_manifest, seed_version
from combee_core.serve.scopes import ScopeError, lift_entries
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.admin import list_topics
from streams.broker.profile import BrokerProfile
from streams.topology.kafka_clients import start_producer
from streams.topology.readable import readable
from streams.topology.topic_reader import read_topic

log = logging.getLogger(__name__)


class PlaybookIOError(CombeeError, ValueError):
    """A playbook import or export that cannot be done as asked; the message says why."""


class PlaybookBusy(PlaybookIOError):
    """The playbook has batches formed but not yet turned into versions: a seeded version would collide."""


class ImportConflict(PlaybookIOError):
    """Another writer took the batch id or version number first: the import did not happen."""


@dataclass(frozen=True)
class ImportResult:
    seeded: SeededVersion
    resumed: bool
    """True when an earlier run of the same import had taken the batch id and this run only published the
    version."""


async def read_versions(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> list[PlaybookVersion]:
    """Every version of the run that counts (reading rule), in log order."""
    records = await read_topic(bootstrap, profile, settings.topic(Topic.PLAYBOOK))
    return valid_versions(readable(records, PlaybookVersion))


async def read_manifests(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile) -> list[BatchManifest]:
    records = await read_topic(bootstrap, profile, settings.topic(Topic.BATCHES))
    return valid_manifests(readable(records, BatchManifest))


async def import_playbook(
    settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, playbook_id: str, entries: list[PlaybookEntry]
) -> ImportResult:
    """Publish ``entries`` as the next version of ``playbook_id``: first the manifest taking the batch id, then the
    version, each confirmed as the first of its number in its log before going on. The run's topics must exist.

    Raises :class:`PlaybookBusy` when batches of the playbook are formed but not yet versions, and
    :class:`ImportConflict` when another writer took the batch id or version first. Rerunning an import that
    stopped between its two records finishes it.
    """
    versions = [v for v in await read_versions(settings, bootstrap, profile) if v.playbook_id == playbook_id]
    manifests = [m for m in await read_manifests(settings, bootstrap, profile) if m.playbook_id == playbook_id]
    parent = versions[-1] if versions else None
    current = parent.version if parent is not None else 0
    next_batch = manifests[-1].batch_id + 1 if manifests else 0
    target = manifests[-1].target_batch_size if manifests else settings.batch_size
    seeded = seed_version(playbook_id, entries, parent, target_batch_size=target, now=utc_now())
    resumed = (next_batch == current + 1 and is_import_manifest(manifests[-1])
               and manifests[-1].trace_ids == seeded.manifest.trace_ids)
    if not resumed and next_batch != current:
        held = manifests[-1]
        why = (f"an unfinished import ({held.trace_ids[0]}) holds batch {held.batch_id}: rerun that import to "
               f"finish it" if is_import_manifest(held) else
               f"batch(es) {current}..{next_batch - 1} are formed but not yet versions: import once they are in "
               f"(`combee status` shows them)")
        raise PlaybookBusy(f"{playbook_id} is at version {current}, {why}")
    producer = await start_producer(bootstrap, profile)
    try:
        if not resumed:
            await producer.send_and_wait(settings.topic(Topic.BATCHES), seeded.manifest.to_json_bytes(),
                                         key=playbook_id.encode())
            taken = [m for m in await read_manifests(settings, bootstrap, profile)
                     if m.playbook_id == playbook_id and m.batch_id == current]
            if not taken or taken[0].trace_ids != seeded.manifest.trace_ids:
                raise ImportConflict(f"batch {current} of {playbook_id} was formed by a batcher first; nothing "
                                     f"imported (run the import again)")
        await producer.send_and_wait(settings.topic(Topic.PLAYBOOK), seeded.version.to_json_bytes(),
                                     key=playbook_id.encode())
    finally:
        await producer.stop()
    won = [v for v in await read_versions(settings, bootstrap, profile)
           if v.playbook_id == playbook_id and v.version == seeded.version.version]
    if not won or won[0].content_hash != seeded.version.content_hash:
        raise ImportConflict(f"version {seeded.version.version} of {playbook_id} was written by another writer "
                             f"first; the import is void")
    log.info("imported %s v%d (%d entries, %s)", playbook_id, seeded.version.version, len(entries),
             seeded.import_id)
    return ImportResult(seeded, resumed)


async def lift_to_parent(settings: CombeeSettings, bootstrap: str, profile: BrokerProfile, child: str, parent: str,
                         entry_ids: list[str]) -> ImportResult:
    """Propose child entries up to the parent: the parent's next version with copies of them
    (``combee_core.serve.scopes.lift_entries``), published through :func:`import_playbook` (so, with promotion, a
    candidate the promoter decides on). Raises :class:`PlaybookIOError` for a child without versions or an unknown
    entry."""
    versions = await read_versions(settings, bootstrap, profile)
    source = pick_version(versions, child, None)
    mine = [v for v in versions if v.playbook_id == parent]
    latest = mine[-1] if mine else None
    try:
        entries = lift_entries(source.entries, entry_ids, latest.entries if latest else [],
                               latest.next_entry_number if latest else 1, (latest.version if latest else 0) + 1)
    except ScopeError as error:
        raise PlaybookIOError(f"{child}: {error}") from error
    return await import_playbook(settings, bootstrap, profile, parent, entries)


async def require_run_topics(settings: CombeeSettings, bootstrap: str, names: tuple[str, ...], *,
                             connection: KafkaConnection = PLAINTEXT) -> None:
    """Raise :class:`PlaybookIOError` when a topic of the run does not exist (a mistyped prefix, or no worker has
    run)."""
    existing = await list_topics(bootstrap, settings.topic_prefix, connection=connection)
    missing = [settings.topic(name) for name in names if settings.topic(name) not in existing]
    if missing:
        raise PlaybookIOError(f"no topic {', '.join(missing)} on {bootstrap}: no run with prefix "
                              f"{settings.topic_prefix} (start a worker with that prefix first, or check --prefix)")


def pick_version(versions: list[PlaybookVersion], playbook_id: str | None, number: int | None) -> PlaybookVersion:
    """The version asked for: of ``playbook_id`` (optional when the run has one playbook), number ``number``
    (default: the latest)."""
    playbooks = sorted({v.playbook_id for v in versions})
    if not playbooks:
        raise PlaybookIOError("no playbook versions in this run yet")
    if playbook_id is None:
        if len(playbooks) > 1:
            raise PlaybookIOError(f"the run has {len(playbooks)} playbooks ({', '.join(playbooks[:5])}): "
                                  f"choose one with --playbook")
        playbook_id = playbooks[0]
    mine = [v for v in versions if v.playbook_id == playbook_id]
    if not mine:
        raise PlaybookIOError(f"no versions of playbook {playbook_id!r} (the run has: {', '.join(playbooks[:5])})")
    if number is None:
        return mine[-1]
    for version in mine:
        if version.version == number:
            return version
    raise PlaybookIOError(f"{playbook_id} has versions 1..{mine[-1].version}, not {number}")
