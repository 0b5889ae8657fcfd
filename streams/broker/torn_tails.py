"""Repairing Tansu's torn writes before it starts on the durable storage.

Tansu's ``s3://`` engine (0.6.0) stores a produce in two steps: it advances the partition's
``watermark.json`` (a conditional put), then writes the batch as ``records/<base offset>.batch``, and only then
acknowledges. A Tansu killed between the two leaves offsets below the high watermark that no batch holds. Inside the
log that is harmless (a fetch returns the next batch that exists), but at its tail it is not: the fetch high
watermark promises records that never come, so every reader that reads "to the end" waits forever (a stage's live
view: ``LogViewTimeout`` "view at offset 2, did not reach 2"; ``combee status`` timing out). The offsets of a torn
tail were never acknowledged (no batch, no ack), so lowering the watermark to the end of the last stored batch loses
nothing; done only while Tansu is not running (a running Tansu may be between its two steps).
"""

from __future__ import annotations

import builtins
import http.client
import json
import logging
import struct
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from combee_core.errors import CombeeError

log = logging.getLogger(__name__)

_S3 = "{http://s3.amazonaws.com/doc/2006-03-01/}"
LAST_OFFSET_DELTA_AT = 23
"""Byte offset of ``lastOffsetDelta`` (int32) in a Kafka v2 record batch (the format Tansu stores)."""
LOOK_BACK = 10_000
"""Offsets below the watermark where the listing for the last batch starts (a full listing when none is there)."""


class TornTailRepairError(CombeeError, RuntimeError):
    """The storage did not answer as expected while checking the partitions' tails."""


def batch_end(base_offset: int, batch: bytes) -> int:
    """The offset after the last record of a stored batch."""
    if len(batch) < LAST_OFFSET_DELTA_AT + 4:
        raise ValueError(f"a stored batch of {len(batch)} bytes is too short to be a record batch")
    (delta,) = struct.unpack_from(">i", batch, LAST_OFFSET_DELTA_AT)
    return base_offset + delta + 1


def repaired_high(high: int, last_batch_end: int | None, low: int | None) -> int | None:
    """The high watermark to write back, or None when the tail is whole: the end of the last stored batch (else the
    log start) when it is below ``high``."""
    end = last_batch_end if last_batch_end is not None else (low or 0)
    return end if end < high else None


@dataclass
class Repair:
    partition: str
    """``<topic>/<partition>``"""
    high: int
    repaired: int


class BucketClient:
    """The few S3 calls the repair needs, over plain HTTP on loopback (SeaweedFS without IAM takes them unsigned)."""

    def __init__(self, host: str, port: int, bucket: str, timeout_s: float = 10.0, retry_s: float = 30.0) -> None:
        self.host, self.port, self.bucket, self.timeout_s, self.retry_s = host, port, bucket, timeout_s, retry_s

    def _call(self, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One request; a 5xx answer is asked again for up to ``retry_s`` (a storage just restarted after a kill
        serves listings before its volumes)."""
        deadline = time.monotonic() + self.retry_s
        while True:
            status, headers_, body_ = self._once(method, path, body, headers)
            if status < 500 or time.monotonic() > deadline:
                return status, headers_, body_
            time.sleep(0.25)

    def _once(self, method: str, path: str, body: bytes | None,
              headers: dict[str, str] | None) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        except (OSError, http.client.HTTPException) as error:
            raise TornTailRepairError(f"storage at {self.host}:{self.port}: {method} failed: {error}") from error
        finally:
            connection.close()

    def list(self, prefix: str, *, delimiter: str | None = None, start_after: str | None = None
             ) -> tuple[list[str], list[str]]:
        """(keys, common prefixes) under ``prefix``, every page."""
        keys: list[str] = []
        prefixes: list[str] = []
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            query.update({k: v for k, v in (("delimiter", delimiter), ("start-after", start_after),
                                            ("continuation-token", token)) if v})
            status, _, body = self._call("GET", f"/{self.bucket}?{urlencode(query)}")
            if status != 200:
                raise TornTailRepairError(f"listing {prefix!r} answered HTTP {status}")
            root = ElementTree.fromstring(body)
            keys += [e.text or "" for e in root.iter(f"{_S3}Key")]
            prefixes += [e.text or "" for e in root.iter(f"{_S3}Prefix") if e.text and e.text != prefix]
            truncated = (root.findtext(f"{_S3}IsTruncated") or "false") == "true"
            token = root.findtext(f"{_S3}NextContinuationToken")
            if not truncated or not token:
                return keys, prefixes

    def list_objects(self, prefix: str) -> builtins.list[tuple[str, int, str]]:
        """(key, size, last modified as ISO 8601) of every object under ``prefix``, every page."""
        objects: builtins.list[tuple[str, int, str]] = []
        token: str | None = None
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            query.update({"continuation-token": token} if token else {})
            status, _, body = self._call("GET", f"/{self.bucket}?{urlencode(query)}")
            if status != 200:
                raise TornTailRepairError(f"listing {prefix!r} answered HTTP {status}")
            root = ElementTree.fromstring(body)
            objects += [(item.findtext(f"{_S3}Key") or "", int(item.findtext(f"{_S3}Size") or 0),
                         item.findtext(f"{_S3}LastModified") or "") for item in root.iter(f"{_S3}Contents")]
            token = root.findtext(f"{_S3}NextContinuationToken")
            if (root.findtext(f"{_S3}IsTruncated") or "false") != "true" or not token:
                return objects

    def delete(self, key: str) -> None:
        status, _, _ = self._call("DELETE", f"/{self.bucket}/{quote(key)}")
        if status not in (200, 204, 404):
            raise TornTailRepairError(f"deleting {key!r} answered HTTP {status}")

    def get(self, key: str) -> tuple[bytes, str | None] | None:
        status, headers, body = self._call("GET", f"/{self.bucket}/{quote(key)}")
        if status == 404:
            return None
        if status != 200:
            raise TornTailRepairError(f"reading {key!r} answered HTTP {status}")
        return body, headers.get("etag")

    def put_if_match(self, key: str, body: bytes, etag: str | None) -> bool:
        headers = {"Content-Type": "application/json", **({"If-Match": etag} if etag else {})}
        status, _, _ = self._call("PUT", f"/{self.bucket}/{quote(key)}", body, headers)
        return status == 200


def repair_torn_tails(client: BucketClient, cluster: str) -> list[Repair]:
    """Lower every partition's high watermark that runs past its last stored batch; the repairs made."""
    repairs = []
    _, topics = client.list(f"clusters/{cluster}/topics/", delimiter="/")
    for topic in topics:
        _, partitions = client.list(f"{topic}partitions/", delimiter="/")
        for partition in partitions:
            try:
                repair = _repair_partition(client, partition)
            except TornTailRepairError as error:
                log.warning("could not check the tail of %s: %s", partition, error)
                continue
            if repair is not None:
                repairs.append(repair)
    return repairs


def _repair_partition(client: BucketClient, prefix: str) -> Repair | None:
    stored = client.get(f"{prefix}watermark.json")
    if stored is None:
        return None
    body, etag = stored
    watermark = json.loads(body)
    high = watermark.get("high") or 0
    records = f"{prefix}records/"
    start = f"{records}{max(0, high - LOOK_BACK):020d}.batch"
    keys, _ = client.list(records, start_after=start) if high > LOOK_BACK else ([], [])
    if not keys:
        keys, _ = client.list(records)
    bases = sorted(int(key.rsplit("/", 1)[1][:20]) for key in keys if key.endswith(".batch"))
    bases = [base for base in bases if base < high]
    end = None
    if bases:
        batch = client.get(f"{records}{bases[-1]:020d}.batch")
        end = batch_end(bases[-1], batch[0]) if batch is not None else None
    repaired = repaired_high(high, end, watermark.get("low"))
    if repaired is None:
        return None
    topic, _, partition = prefix.rstrip("/").split("/topics/", 1)[1].partition("/partitions/")
    name = f"{topic}/{int(partition)}"
    if not client.put_if_match(f"{prefix}watermark.json", json.dumps({**watermark, "high": repaired}).encode(), etag):
        raise TornTailRepairError(f"{name}: the watermark changed while it was repaired (is a Tansu running?)")
    log.warning("%s: high watermark %d ran past the last stored batch (a write torn by a kill); lowered to %d",
                name, high, repaired)
    return Repair(name, high, repaired)
