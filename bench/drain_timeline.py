"""Where a stream's drain goes: per version of a playbook, when each stage was done, read back from the topics.

For each version: its batch's last reflection (the ``reflections`` record), the batch's close (the manifest's
``closed_at``) and its last copy dealt (the ``shuffle`` record), the previous version's ``published_at`` (a batch is
aggregated on the version before it), its aggregator calls (each ``partials`` record's time less its call's
``latency_s``: when the call started; the record's time: when it ended) and its own ``published_at``. From these, per
version, the parts of its time from close to version:

- **wait**: for the previous version, when it came out after the close (the version chain was busy);
- **hand-off**: from the later of close and previous version to its first aggregator call's start (shuffle, the
  aggregators' windows, fetch waits);
- **aggregate**: the first call's start to the last partial (the calls, in parallel, and their spread);
- **reduce**: the last partial to the version (the reducer: a merge or a call, and its write);
- **longest_call**: the batch's slowest aggregator call (``aggregate`` less it: how far apart the calls started).

:func:`drain_parts` gives the last version's parts after the last send and the median parts of the versions before
it (the steady state's cycle, split the same way). Record times are the producers' clocks: one machine here.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from combee_core.models import BatchManifest, PartialUpdate, PlaybookVersion, Reflection, ShuffledReflection
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.topology.topic_reader import read_topic


@dataclass(frozen=True)
class VersionTimes:
    """Epoch seconds of one version's stages (None: not found on the topics)."""

    playbook_id: str
    version: int
    n: int
    closed_by: str
    last_reflection: float | None
    closed: float
    shuffled: float | None
    previous_out: float | None
    first_call: float | None
    last_partial: float | None
    published: float
    longest_call_s: float | None = None
    """The batch's slowest aggregator call (its ``latency_s``): ``aggregate`` less it is the calls' stagger."""

    def parts(self) -> dict[str, float | None]:
        """Seconds of wait, hand-off, aggregate and reduce (module docstring); they add up to close -> version."""
        start = max(self.closed, self.previous_out or self.closed)
        if self.first_call is None or self.last_partial is None:
            return dict(wait=start - self.closed, hand_off=None, aggregate=None, reduce=None, longest_call=None)
        first_call = max(self.first_call, start)  # a call's start is its end less its latency: clock grain
        return dict(wait=start - self.closed, hand_off=first_call - start,
                    aggregate=self.last_partial - first_call, reduce=self.published - self.last_partial,
                    longest_call=self.longest_call_s)


def version_times(versions: list[PlaybookVersion], manifests: list[BatchManifest], reflected: dict[str, float],
                  shuffled: dict[tuple[str, int], float], partials: list[tuple[PartialUpdate, float]],
                  ) -> list[VersionTimes]:
    """Per version (in order per playbook): its stage times. ``reflected``: reflection id -> record time;
    ``shuffled``: (playbook, batch) -> its last copy's record time; ``partials``: each partial with its record time."""
    manifest_of = {(m.playbook_id, m.batch_id): m for m in manifests}
    calls: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for partial, at in partials:
        calls.setdefault((partial.playbook_id, partial.batch_id), []).append((at - partial.latency_s, at))
    longest = {key: max(e - s for s, e in spans) for key, spans in calls.items()}
    out: list[VersionTimes] = []
    previous: dict[str, float] = {}
    for version in sorted(versions, key=lambda v: (v.playbook_id, v.version)):
        key = (version.playbook_id, version.batch_id)
        manifest = manifest_of.get(key)
        if manifest is None:
            continue
        spans = calls.get(key, [])
        reflections = [reflected[r] for r in manifest.reflection_ids if r in reflected]
        out.append(VersionTimes(
            version.playbook_id, version.version, manifest.n, manifest.closed_by,
            max(reflections, default=None), manifest.closed_at.timestamp(), shuffled.get(key),
            previous.get(version.playbook_id), min((s for s, _ in spans), default=None),
            max((e for _, e in spans), default=None), version.published_at.timestamp(), longest.get(key)))
        previous[version.playbook_id] = version.published_at.timestamp()
    return out


def _median_parts(times: list[VersionTimes]) -> dict[str, float | None]:
    parts = [t.parts() for t in times]
    medians: dict[str, float | None] = {}
    for name in ("wait", "hand_off", "aggregate", "reduce", "longest_call"):
        values = [v for p in parts if (v := p[name]) is not None]
        medians[name] = round(statistics.median(values), 2) if values else None
    return medians


def summarise_drain(times: list[VersionTimes], stream_end: float, steady: int = 20) -> dict[str, Any]:
    """The last version's stage times after the last send (s) and its parts; the median parts of the ``steady``
    versions before it."""
    if not times:
        return dict(last_reflection_s=None, last_batch_closed_s=None, last_batch_closed_by=None, last_batch_n=None)
    last = max(times, key=lambda t: t.published)
    before = sorted((t for t in times if t is not last), key=lambda t: t.published)[-steady:]

    def after(at: float | None) -> float | None:
        return round(at - stream_end, 2) if at is not None else None

    return dict(
        last_reflection_s=after(last.last_reflection), last_batch_closed_s=after(last.closed),
        last_batch_closed_by=last.closed_by, last_batch_n=last.n,
        drain_timeline={"previous_closed": after(before[-1].closed) if before else None,
                        **{name: after(at) for name, at in asdict(last).items()
                           if name in ("last_reflection", "closed", "shuffled", "previous_out", "first_call",
                                       "last_partial", "published")}},
        drain_last_parts={name: round(v, 2) if v is not None else None for name, v in last.parts().items()},
        steady_parts=_median_parts(before),
        steady_close_to_version_s=round(statistics.median(t.published - t.closed for t in before), 2) if before
        else None,
    )


async def drain_parts(settings: CombeeSettings, broker, stream_end: float, versions: list[PlaybookVersion],
                      prefix: str) -> dict[str, Any]:
    """Read the run's topics and :func:`summarise_drain` the versions of the playbooks named ``prefix``..."""
    async def records(topic: Topic) -> list:
        return [r for r in await read_topic(broker.bootstrap, broker.profile, settings.topic(topic))
                if (r.key or b"").decode(errors="replace").startswith(prefix)]

    reflected = {}
    for record in await records(Topic.REFLECTIONS):
        reflected[Reflection.from_json_bytes(record.value).reflection_id] = record.timestamp / 1000
    manifests = [BatchManifest.from_json_bytes(r.value) for r in await records(Topic.BATCHES)]
    shuffled: dict[tuple[str, int], float] = {}
    for record in await records(Topic.SHUFFLE):
        copy = ShuffledReflection.from_json_bytes(record.value)
        key = (copy.playbook_id, copy.batch_id)
        shuffled[key] = max(shuffled.get(key, 0.0), record.timestamp / 1000)
    partials = [(PartialUpdate.from_json_bytes(r.value), r.timestamp / 1000) for r in await records(Topic.PARTIALS)]
    ours = [v for v in versions if v.playbook_id.startswith(prefix)]
    return summarise_drain(version_times(ours, manifests, reflected, shuffled, partials), stream_end)
