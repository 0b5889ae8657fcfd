"""The Python client an agent uses: the served playbook (cached, refreshed in the background), the entries a task
needs as prompt text, and runs reported as traces whose ``used_entries`` are filled in from that text."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from combee_client.cache import cache_of, default_cache_path, load_cache, save_cache
from combee_client.follow import FollowState, ServedFollower
from combee_client.runs import Rendering, default_agent_id, run_trace
from combee_core.connection import KafkaConnection
from combee_core.errors import CombeeError
from combee_core.models import PlaybookEntry, PlaybookVersion, Trace, TraceStep
from combee_core.models.traces import MetadataValue
from combee_core.playbook.embedding import Embedder
from combee_core.playbook.retrieval import DEFAULT_TOP_K, RetrievalIndex
from combee_core.playbook.value import Playbook
from combee_core.serve.review import review_on
from combee_core.serve.scoped_serving import Chain, chain_etag, composed_index, render_view_for_task, view_of
from combee_core.serve.scopes import ServedView, parse_parents, scope_chain
from combee_core.settings import CombeeSettings
from combee_core.topology import Topic
from streams.broker.connection import client_kwargs

log = logging.getLogger(__name__)

Redactor = Callable[[Trace], Trace]
"""Called on every trace before it is produced (e.g. to remove secrets or personal data); returns the trace to send."""

PENDING_RENDERINGS = 10_000
"""Renderings kept for a later report by task text; past this the oldest is forgotten, logged and counted
(``CombeeClient.forgotten_renderings``): its run, if reported by task text, then has no used entries."""


class ClientError(CombeeError):
    """The client was misconfigured (one line saying what to set)."""


class ReportNotDelivered(CombeeError):
    """A run's trace was not acknowledged by the broker in time; ``trace`` is the trace, to send again later."""

    def __init__(self, trace: Trace, reason: str) -> None:
        super().__init__(f"trace {trace.trace_id} not delivered: {reason}")
        self.trace = trace


@dataclass(frozen=True)
class ServedPlaybook:
    """The playbook an agent runs now: its version (0: empty), entries, and where the client got it."""

    playbook_id: str
    version: int
    entries: tuple[PlaybookEntry, ...]
    source: str
    """``log`` (the topics, read to their end), ``cache`` (the cache file; the broker not read yet) or ``empty``."""
    published: PlaybookVersion | None
    inherited: tuple[tuple[str, PlaybookVersion | None], ...] = ()
    """Each ancestor and its served version, nearest first (``COMBEE_PLAYBOOK_PARENTS``; none: no parent)."""
    view: ServedView | None = None
    """With a parent, the composed view agents are served (``combee_core.serve.scopes``: its own entries, then each
    ancestor's, named ``scope/entry_id``, within the playbook token budget); None without one."""


class CombeeClient:
    """One playbook's served version for an agent, kept fresh by a background thread.

    ``get()`` and ``render()`` never wait on the broker: they answer from the version in memory (the cache file's at
    start, then the topics'). ``report()`` produces a :class:`~combee_core.models.Trace` and waits for the broker's
    acknowledgement. Settings not given come from the ``COMBEE_*`` environment (``CombeeSettings``):
    ``COMBEE_KAFKA_BOOTSTRAP``, ``COMBEE_TOPIC_PREFIX``, ``COMBEE_PROMOTION``, ``COMBEE_REVIEW_PLAYBOOKS`` (review
    mode: only the reviewed entries are served, as ``combee serve`` serves them) and the ``COMBEE_KAFKA_*`` security
    settings. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, playbook_id: str, *, bootstrap: str | None = None, agent_id: str | None = None,
                 topic_prefix: str | None = None, promotion: bool | None = None,
                 connection: KafkaConnection | None = None, cache_path: str | Path | None = None,
                 embedder: Embedder | None = None, redact: Redactor | None = None, report_timeout_s: float = 10.0,
                 settings: CombeeSettings | None = None, parents: Mapping[str, str] | None = None) -> None:
        settings = settings if settings is not None else CombeeSettings.load()
        self.playbook_id = playbook_id
        self.bootstrap = bootstrap or settings.kafka_bootstrap or ""
        if not self.bootstrap:
            raise ClientError("no broker: pass bootstrap= or set COMBEE_KAFKA_BOOTSTRAP")
        self.topic_prefix = settings.topic_prefix if topic_prefix is None else topic_prefix
        self.promotion = settings.promotion if promotion is None else promotion
        self.connection = connection if connection is not None else settings.kafka
        self.agent_id = agent_id or default_agent_id(socket.gethostname(), os.getpid())
        self.cache_path = Path(cache_path) if cache_path else default_cache_path(self.topic_prefix, playbook_id)
        chain = scope_chain(playbook_id, parse_parents(settings.playbook_parents) if parents is None else parents)
        self.ancestors = chain[1:]
        self.token_budget: int | None = settings.playbook_budget_tokens
        """The composed view's budget (with a parent): the one a version is held within, as ``combee serve``."""
        self.embedder = embedder
        self.redact = redact
        self.report_timeout_s = report_timeout_s
        self.forgotten_renderings = 0
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, Rendering] = OrderedDict()
        self._index: tuple[object, RetrievalIndex] | None = None
        self._composed: tuple[str, ServedView] | None = None
        self._producer: AIOKafkaProducer | None = None
        self.review_playbooks = settings.review_playbooks
        """``COMBEE_REVIEW_PLAYBOOKS``: in review mode the agent gets only reviewed entries, as ``combee serve``."""
        state = FollowState()
        cached = load_cache(self.cache_path, playbook_id, self.topic_prefix, self.promotion, self.ancestors,
                            reviewed=self._reviewing())
        if cached is not None:
            state = FollowState(cached.served, "cache", [(item.playbook_id, item.served) for item in cached.inherited])
            log.info("combee client: version %d of %s from %s", cached.served.version if cached.served else 0,
                     playbook_id, self.cache_path)
        self._follower = ServedFollower(playbook_id, self.topic_prefix, self.promotion, self.agent_id,
                                        self.bootstrap, self.connection, state, self._save,
                                        ancestors=self.ancestors, review_playbooks=self.review_playbooks,
                                        broker_kind=settings.broker_kind)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"combee-client-{playbook_id}",
                                        daemon=True)
        self._thread.start()
        self._follow = asyncio.run_coroutine_threadsafe(self._start_following(), self._loop).result()

    async def _start_following(self) -> asyncio.Task[None]:
        return asyncio.create_task(self._follower.run())

    def _reviewing(self) -> bool:
        return any(review_on(self.review_playbooks, scope) for scope in (self.playbook_id, *self.ancestors))

    def _save(self, served: PlaybookVersion | None) -> None:
        try:
            save_cache(self.cache_path, cache_of(self.playbook_id, self.topic_prefix, self.promotion, served,
                                                 self._follower.state.inherited, reviewed=self._reviewing()))
        except OSError as error:
            log.warning("combee client: cannot write the cache file %s: %s", self.cache_path, error)

    # ------------------------------------------------------------------------------------------------ reading

    @property
    def state(self) -> FollowState:
        """What the background follower saw (caught up, errors): for status lines and tests."""
        return self._follower.state

    def get(self) -> ServedPlaybook:
        """The served version now (promoted with promotion on, else the newest), and with a parent each ancestor's
        and the composed view: never waits on the broker."""
        served, source, inherited = self._follower.state.current
        view = self._view([(self.playbook_id, served), *inherited]) if self.ancestors else None
        return ServedPlaybook(self.playbook_id, served.version if served else 0,
                              tuple(served.entries) if served else (), source, served, tuple(inherited), view)

    def wait_for_version(self, version: int, timeout_s: float) -> ServedPlaybook:
        """Block until the served version is ``version`` or later (read from the log); TimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            served = self.get()
            if served.source == "log" and served.version >= version:
                return served
            if time.monotonic() >= deadline:
                raise TimeoutError(f"served version {served.version} ({served.source}) after {timeout_s:g} s, "
                                   f"waiting for {version}")
            time.sleep(0.02)

    def render(self, task: str, k: int = DEFAULT_TOP_K, token_budget: int | None = None) -> Rendering:
        """The ``k`` entries of the served version most relevant to ``task`` as prompt text, within ``token_budget``
        (``combee_core.playbook.retrieval``: deterministic for a version and task; the version's index is built at its
        first render). With a parent, among the composed view's entries (ties: the nearer scope first), named
        ``scope/entry_id`` in the text and the report. Remembered for :meth:`report`."""
        served = self.get()
        if served.view is not None:
            text, tokens, entry_ids = render_view_for_task(served.view, self._composed_index(served), task, k=k,
                                                           token_budget=token_budget)
            rendering = Rendering(self.playbook_id, served.version, task, text, tokens, tuple(entry_ids))
        else:
            rendered = self._retrieval_index(served).render(task, k=k, token_budget=token_budget)
            rendering = Rendering(self.playbook_id, served.version, task, rendered.text, rendered.tokens,
                                  rendered.included_entry_ids)
        with self._lock:
            self._pending.pop(task, None)
            self._pending[task] = rendering
            if len(self._pending) > PENDING_RENDERINGS:
                self._pending.popitem(last=False)
                self.forgotten_renderings += 1
                log.warning("combee client: more than %d renderings not reported; forgot the oldest",
                            PENDING_RENDERINGS)
        return rendering

    def _view(self, chain: Chain) -> ServedView:
        """The composed view of ``chain``, composed once per served version of every scope."""
        key = chain_etag(chain, self.token_budget)
        with self._lock:
            if self._composed is None or self._composed[0] != key:
                self._composed = (key, view_of(chain, self.token_budget))
            return self._composed[1]

    def _composed_index(self, served: ServedPlaybook) -> RetrievalIndex:
        """The composed view's retrieval index, built once per view (per served version of every scope)."""
        assert served.view is not None
        key = ("composed", chain_etag([(self.playbook_id, served.published), *served.inherited], self.token_budget))
        with self._lock:
            if self._index is None or self._index[0] != key:
                self._index = (key, composed_index(served.view, self.embedder))
            return self._index[1]

    def _retrieval_index(self, served: ServedPlaybook) -> RetrievalIndex:
        """The served version's retrieval index, built once per version (the previous one is dropped)."""
        key = (served.version, served.published.content_hash if served.published else "")
        with self._lock:
            if self._index is None or self._index[0] != key:
                next_number = served.published.next_entry_number if served.published else None
                playbook = Playbook.from_entries(self.playbook_id, served.version, served.entries, next_number)
                self._index = (key, RetrievalIndex.build(playbook, self.embedder))
            return self._index[1]

    # ------------------------------------------------------------------------------------------------ reporting

    def report(self, task: str, output: str, *, score: float | None = None, success: bool | None = None,
               feedback: str = "", rendering: Rendering | None = None, task_id: str | None = None,
               trace_id: str | None = None, input: str | None = None, steps: Sequence[TraceStep] = (),
               metadata: Mapping[str, MetadataValue] | None = None) -> Trace:
        """Publish the run of ``task`` on ``traces`` and wait for the broker's acknowledgement. Its
        ``used_entries`` and ``playbook_version`` come from ``rendering``, else from the last :meth:`render` of
        this task text (none rendered: version served now, no used entries). Raises :class:`ReportNotDelivered`
        (carrying the trace) when the broker does not acknowledge within ``report_timeout_s``."""
        trace = self.trace_of(task, output, score=score, success=success, feedback=feedback, rendering=rendering,
                              task_id=task_id, trace_id=trace_id, input=input, steps=steps, metadata=metadata)
        future = asyncio.run_coroutine_threadsafe(self._send(trace), self._loop)
        try:
            future.result(self.report_timeout_s + 1.0)
        except (TimeoutError, KafkaError, OSError) as error:
            future.cancel()
            raise ReportNotDelivered(trace, f"{type(error).__name__} {error}".strip()) from error
        return trace

    def trace_of(self, task: str, output: str, *, rendering: Rendering | None = None,
                 **fields: Any) -> Trace:
        """The trace :meth:`report` would send (redacted), without sending it."""
        if rendering is None:
            with self._lock:
                rendering = self._pending.pop(task, None)
        trace = run_trace(playbook_id=self.playbook_id, agent_id=self.agent_id, rendering=rendering, task=task,
                          output=output, created_at=datetime.now(timezone.utc), version=self.get().version, **fields)
        return self.redact(trace) if self.redact is not None else trace

    async def _send(self, trace: Trace) -> None:
        async def send() -> None:
            if self._producer is None:
                producer = AIOKafkaProducer(**client_kwargs(self.bootstrap, self.connection), acks="all",
                                            enable_idempotence=False, linger_ms=5,
                                            request_timeout_ms=int(self.report_timeout_s * 1000))
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
            await self._producer.send_and_wait(f"{self.topic_prefix}{Topic.TRACES}", trace.to_json_bytes(),
                                               key=trace.playbook_id.encode())

        await asyncio.wait_for(send(), self.report_timeout_s)

    # ------------------------------------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop following and close the producer (waits at most a few seconds)."""
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow
            if self._producer is not None:
                await self._producer.stop()

        try:
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        except (TimeoutError, KafkaError, OSError) as error:
            log.warning("combee client: did not stop cleanly: %s", error)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> CombeeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
