"""Retention on the durable broker: Tansu 0.6.0's ``s3://`` engine has none (its DeleteRecords is ``todo!()``, its
maintenance does nothing without a data lake), so ``combee broker`` deletes the old record batches of the topics that
grow without bound from the bucket itself (:func:`combee_core.retention.batches_to_delete` decides which).

Why deleting a batch object is enough for Tansu (read in its 0.6.0 ``dynostore.rs``): a fetch lists the partition's
``records/`` and returns the stored batches from the requested offset on, so a reader below the first remaining
batch gets that batch next; ListOffsets' earliest is the oldest remaining object; the high watermark
(``watermark.json``) is not touched, so the log's end and every later offset stay where they were. Committed
offsets are read from the bucket too (``groups/consumers/<group>/offsets/<topic>/partitions/<n>.json``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime

from combee_core.retention import StoredBatch, batches_to_delete, retained_topic
from streams.broker.torn_tails import BucketClient, TornTailRepairError

log = logging.getLogger(__name__)


@dataclass
class RetentionPass:
    """What one pass deleted: batches and bytes per ``<topic>/<partition>``."""

    deleted: dict[str, int] = field(default_factory=dict)
    bytes: int = 0

    def summary(self) -> str:
        where = ", ".join(f"{name} {count}" for name, count in sorted(self.deleted.items()))
        return f"{sum(self.deleted.values())} batch(es), {self.bytes / 1e6:.1f} MB ({where})"


def committed_offsets(client: BucketClient, cluster: str, since: float) -> dict[tuple[str, int], list[int]]:
    """The offsets consumer groups committed after ``since`` (epoch s), by (topic, partition). A group silent since
    (a finished run's) no longer holds retention back, as Kafka forgets an empty group's offsets after
    ``offsets.retention.minutes``. An unreadable one counts as 0: nothing of its partition goes."""
    committed: dict[tuple[str, int], list[int]] = {}
    for key, _size, modified in client.list_objects(f"clusters/{cluster}/groups/consumers/"):
        parts = key.split("/")  # clusters/C/groups/consumers/G/offsets/T/partitions/NNNNNNNNNN.json
        if len(parts) != 9 or parts[5] != "offsets" or parts[7] != "partitions" or not parts[8].endswith(".json"):
            continue
        if _epoch(modified) < since:
            continue
        stored = client.get(key)
        if stored is None:
            continue
        try:
            offset = max(0, int(json.loads(stored[0])["offset"]))
        except (ValueError, KeyError, TypeError):
            log.warning("retention: unreadable committed offset %s: every batch of its partition kept", key)
            offset = 0
        committed.setdefault((parts[6], int(parts[8][:10])), []).append(offset)
    return committed


def _epoch(modified: str) -> float:
    return datetime.fromisoformat(modified.replace("Z", "+00:00")).timestamp()


GROUP_EXPIRY_S = 7 * 86400.0
"""A consumer group that committed nothing for this long no longer holds retention back (Kafka's default
``offsets.retention.minutes``)."""


def apply_retention(client: BucketClient, cluster: str, max_age_s: float, now: float,
                    group_expiry_s: float = GROUP_EXPIRY_S) -> RetentionPass:
    """Delete the batches of retained topics that :func:`batches_to_delete` lets go; what was deleted."""
    done = RetentionPass()
    _, topics = client.list(f"clusters/{cluster}/topics/", delimiter="/")
    names = [prefix.rstrip("/").rsplit("/", 1)[1] for prefix in topics]
    retained = [name for name in names if retained_topic(name)]
    if not retained:
        return done
    committed = committed_offsets(client, cluster, now - group_expiry_s)
    for topic in retained:
        _, partitions = client.list(f"clusters/{cluster}/topics/{topic}/partitions/", delimiter="/")
        for prefix in partitions:
            partition = int(prefix.rstrip("/").rsplit("/", 1)[1])
            objects = client.list_objects(f"{prefix}records/")
            batches = {StoredBatch(int(key.rsplit("/", 1)[1][:20]), size, _epoch(modified)): key
                       for key, size, modified in objects if key.endswith(".batch")}
            for batch in batches_to_delete(list(batches), now, max_age_s, committed.get((topic, partition), ())):
                try:
                    client.delete(batches[batch])
                except TornTailRepairError as error:
                    log.warning("retention: %s", error)
                    break
                done.deleted[f"{topic}/{partition}"] = done.deleted.get(f"{topic}/{partition}", 0) + 1
                done.bytes += batch.size
    return done
