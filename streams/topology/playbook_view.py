"""The latest version of every playbook, as a stage's live view of the ``playbook`` topic (for role context).

The reflector and the aggregators give their LLM calls the playbook (the reflector the entries an agent used, the
aggregator the whole playbook within the context budget). A :class:`~.log_view.LogView` applies the reading
rule (the first record of each version number counts) and keeps the raw bytes of each playbook's recent versions;
a record is validated once, when a call first needs it. The view checkpoints like the reducer's, so a restart reads
the latest version of each playbook, not the whole topic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import orjson
from aiokafka.structs import ConsumerRecord
from pydantic import ValidationError

from combee_core.log_limit import RepeatLimit
from combee_core.log_order import ContiguousNumbers
from combee_core.models import PlaybookVersion
from combee_core.playbook import Playbook, render_entry
from combee_core.serve.scopes import split_used
from combee_core.topology import Topic
from streams.topology.runtime import Stage
from streams.topology.views.log_view import GatedState, LogView

log = logging.getLogger(__name__)


KEEP_VERSIONS = 64
"""Versions of each playbook kept (raw bytes, validated on first use): a trace may name any of the last 64."""
RESTART_VERSIONS = 2
"""Versions of each playbook a restart loads from the checkpoint: the newest and the one before (the aggregators'
context with ``context_lag`` 1, ``combee_core.aggregate.processor.context_version``)."""
SAY_EVERY_S = 60.0
"""A context condition many calls meet at once (waiting for a version, falling back from one) is logged once with
how many calls meet it, then at most once per this many seconds (``combee_core.log_limit``)."""


class PlaybookVersions:
    """Per playbook, its last :data:`KEEP_VERSIONS` versions seen on the ``playbook`` topic.

    Role context is taken from a *given* version (the one a batch will be applied to, the one an agent ran with),
    not from whatever is newest when the call happens, so the same traces give the same prompts in every run and
    replay finds every call in its record. :meth:`at` waits for that version when the view has not applied it yet.
    """

    def __init__(self, stage: Stage, on_version: Callable[[str, list[str]], None] | None = None, *,
                 say_every_s: float = SAY_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._stage = stage
        self._on_version = on_version
        """Told each new version's playbook and lineage (the reflector's backlog watch)."""
        self._state = GatedState(ContiguousNumbers[str](start=1), load=self._load)
        self._raw: dict[str, dict[int, bytes]] = {}
        self._cache: dict[tuple[str, int], Playbook] = {}
        self._offsets: dict[str, dict[int, int]] = {}
        self._waiters: list[tuple[str, int, asyncio.Future[None]]] = []
        self._said: RepeatLimit[tuple[str, str, int]] = RepeatLimit(say_every_s)
        """(condition, playbook, version) -> when it was last logged: one line per condition, not per call."""
        self._clock = clock
        self.view: LogView | None = None

    async def start(self) -> None:
        self.view = LogView(self._stage, Topic.PLAYBOOK, self._apply, self._state)
        await self.view.start()

    @staticmethod
    def _number(record: ConsumerRecord) -> tuple[str, int] | None:
        try:
            data = orjson.loads(record.value) if record.value is not None else None
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict):
            return None
        playbook_id, version = data.get("playbook_id"), data.get("version")
        if not isinstance(playbook_id, str) or not isinstance(version, int) or isinstance(version, bool):
            return None
        return playbook_id, version

    def _apply(self, record: ConsumerRecord) -> None:
        number = self._number(record)
        if number is None:
            self._stage.ctx.count("unreadable_playbook_records")  # the reducer dead-letters it; context skips it
            return
        if self._state.gate.accept(*number):
            self._take(*number, record)
            if self._on_version is not None and record.value is not None:
                lineage = orjson.loads(record.value).get("lineage")
                self._on_version(number[0], [str(t) for t in lineage] if isinstance(lineage, list) else [])

    def _load(self, record: ConsumerRecord) -> None:
        number = self._number(record)
        if number is not None:
            self._take(*number, record)

    def _take(self, playbook_id: str, version: int, record: ConsumerRecord) -> None:
        assert record.value is not None
        kept = self._raw.setdefault(playbook_id, {})
        kept[version] = record.value
        for old in [v for v in kept if v <= version - KEEP_VERSIONS]:
            del kept[old]
            self._cache.pop((playbook_id, old), None)
        self._remember(playbook_id, version, record.offset)
        self._said.end(("waiting", playbook_id, version))
        waiting = []
        for waiter in self._waiters:
            if waiter[0] == playbook_id and waiter[1] <= version:
                if not waiter[2].done():
                    waiter[2].set_result(None)
            else:
                waiting.append(waiter)
        self._waiters = waiting

    def _remember(self, playbook_id: str, version: int, offset: int) -> None:
        """Checkpoint the offsets of the playbook's newest :data:`RESTART_VERSIONS` versions (loaded in any order at
        a restart): with a context lag the aggregators read the version before the newest."""
        offsets = self._offsets.setdefault(playbook_id, {})
        offsets[version] = offset
        for rank, kept in enumerate(sorted(offsets, reverse=True)):
            if rank >= RESTART_VERSIONS:
                del offsets[kept]
            else:
                self._state.latest[playbook_id + "~" * rank] = offsets[kept]  # "pb": newest, "pb~": the one before

    def latest_version(self, playbook_id: str) -> int:
        """The newest version of ``playbook_id`` applied so far (0 when none)."""
        return max(self._raw.get(playbook_id, {}), default=0)

    async def at(self, playbook_id: str, version: int, timeout_s: float | None, *,
                 warn_every_s: float = 60.0) -> Playbook:
        """Version ``version`` of the playbook (version 0 is empty), waiting for it to arrive: up to ``timeout_s``,
        then the newest one kept is used instead (logged: that call's prompt then depends on timing); with
        ``timeout_s=None`` for as long as it takes (a warning after ``warn_every_s``), for a version the pipeline is
        sure to publish. A version older than the versions kept also gets the newest one (logged). Each warning is
        one line per condition with the number of calls in it, at most one per ``say_every_s``, not one per call."""
        if version > self.latest_version(playbook_id):
            arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((playbook_id, version, arrived))
            try:
                await self._wait(arrived, playbook_id, version, timeout_s, warn_every_s)
            finally:
                self._waiters = [w for w in self._waiters if w[2] is not arrived]
        kept = self._raw.get(playbook_id, {})
        if version not in kept and version != 0:
            fallback = self.latest_version(playbook_id)
            if (calls := self._said.observe(("not kept", playbook_id, version), self._clock())) is not None:
                log.warning("%s v%d is not kept by this view; using v%d as the roles' context%s", playbook_id,
                            version, fallback, _calls_since(calls))
            version = fallback
        return self.playbook(playbook_id, version)

    async def _wait(self, arrived: asyncio.Future[None], playbook_id: str, version: int, timeout_s: float | None,
                    warn_every_s: float) -> None:
        waited = 0.0
        while True:
            step = warn_every_s if timeout_s is None else timeout_s
            try:
                await asyncio.wait_for(asyncio.shield(arrived), step)
                return
            except TimeoutError:
                if arrived.done():  # it arrived as the wait timed out: nothing to say
                    return
                waited += step
                if timeout_s is not None:
                    if (calls := self._said.observe(("fell back", playbook_id, version), self._clock())) is not None:
                        log.warning("%s v%d did not arrive within %.0f s; using v%d as the roles' context%s",
                                    playbook_id, version, timeout_s, self.latest_version(playbook_id),
                                    _calls_since(calls))
                    return
                if self._said.observe(("waiting", playbook_id, version), self._clock()) is not None:
                    waiting = sum(1 for w in self._waiters if w[0] == playbook_id and w[1] == version)
                    log.warning("%s: still waiting for v%d as the roles' context after %.0f s (newest v%d; %d call%s "
                                "waiting for it)", playbook_id, version, waited, self.latest_version(playbook_id),
                                waiting, "" if waiting == 1 else "s")

    def playbook(self, playbook_id: str, version: int) -> Playbook:
        """A kept version (validated on first use; version 0, or one not kept or unreadable, is empty)."""
        cached = self._cache.get((playbook_id, version))
        if cached is not None:
            return cached
        raw = self._raw.get(playbook_id, {}).get(version)
        playbook = Playbook.empty(playbook_id)
        if raw is not None:
            try:
                record = PlaybookVersion.from_json_bytes(raw)
                playbook = Playbook.from_entries(playbook_id, record.version, record.entries,
                                                 record.next_entry_number)
            except (ValueError, ValidationError) as error:
                log.warning("%s v%d is unreadable (%s); the roles get no playbook context", playbook_id, version,
                            error)
        self._cache[(playbook_id, version)] = playbook
        return playbook


def _calls_since(calls: int) -> str:
    return "" if calls == 1 else f" ({calls} calls since the last such line)"


def used_entries_text(playbook: Playbook, used: object) -> str:
    """The entries an agent used (``metadata.used_entries``: comma-separated ids), rendered one per line as
    ``[id] helpful=X harmful=Y :: content``; an id the playbook no longer holds says so. Its own entries named as a
    composed view names them (``<playbook_id>/<id>``) are looked up by ``<id>``; another scope's (inherited from a
    parent, docs/scopes.md) are listed as not learned from here."""
    own, inherited = split_used(playbook.playbook_id,
                                [part.strip() for part in str(used or "").split(",") if part.strip()])
    lines = []
    for entry_id in own:
        entry = playbook.get(entry_id)
        lines.append(render_entry(entry) if entry is not None else
                     f"[{entry_id}] (not in the latest version v{playbook.version})")
    lines += [f"[{entry_id}] (inherited from playbook {entry_id.partition('/')[0]}: not learned from here)"
              for entry_id in inherited]
    return "\n".join(lines)
