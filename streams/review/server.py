"""The review web server (``combee ui``): an aiohttp app that reads the topics at each request and writes decisions
to ``review``. Loopback by default; bound to any other address it refuses to start without a token
(``COMBEE_UI_TOKEN``), and then every request must carry it (``?token=`` once, kept in a cookie, or
``Authorization: Bearer``). Every form carries a per-process secret, so another site cannot post decisions; a
foreign ``Host`` is refused 421 and a foreign ``Origin`` 403, token or not, and every answer carries the page's
security headers (``combee_core.serve.doors``)."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import MultiDictProxy

from combee_core.errors import CombeeError
from combee_core.models import utc_now
from combee_core.playbook.embedding import Embedder, EmbeddingCache
from combee_core.playbook.embedding_models import embedder_from
from combee_core.playbook.meaning import Judge
from combee_core.serve.doors import PAGE_HEADERS
from combee_core.serve.review import ReviewInputError, make_decision, review_on
from combee_core.serve.review_context import closest_reflections, curation_judge, entry_history, making_version
from combee_core.serve.review_inbox import InboxQuery, focused, scope_choices
from combee_core.serve.review_undo import make_undo
from combee_core.serve.scopes import parse_parents
from combee_core.settings import CombeeSettings
from streams.broker.profile import BrokerProfile
from streams.review.focus import focus_page
from streams.review.forms import KEYS_PATH, KEYS_SCRIPT
from streams.review.log import playbook_ids, provenance, read_snapshot, write_decision
from streams.review.page import entry_page, error_page, index_page, playbook_page, reflections_traces
from streams.topology.web_app import door_policy, guard, http_url, start_app, tls_context

log = logging.getLogger(__name__)
COOKIE = "combee_ui_token"
REVIEWER_COOKIE = "combee_reviewer"
"""The name a reviewer last decided under: the pages' default reviewer for that browser."""


class UiBindError(CombeeError, ValueError):
    """``combee ui`` asked to listen beyond this machine without a token."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """:class:`UiBindError` for an address beyond loopback without a token."""
    if not is_loopback(host) and not token:
        raise UiBindError(f"combee ui will not listen on {host} without a token: set COMBEE_UI_TOKEN (every request "
                          "must then carry it), or bind 127.0.0.1")


@dataclass
class ReviewServer:
    """``async with ReviewServer(settings, bootstrap, profile) as server``: serves until the context ends."""

    settings: CombeeSettings
    bootstrap: str
    profile: BrokerProfile
    reviewer: str
    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    _runner: web.AppRunner | None = None
    _tls: bool = False
    _embedder: tuple[Embedder | None] | None = None
    """(curation's embedder, or None for the lexical judge), once made."""
    _embeddings: dict[str, EmbeddingCache] = field(default_factory=dict)
    """Per playbook, the vectors of the texts judged so far (curation's embedder, made on first use)."""

    def __post_init__(self) -> None:
        check_bind(self.host, self.token)

    async def __aenter__(self) -> ReviewServer:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/", self.index)
        app.router.add_get("/p/{pb}", self.playbook)
        app.router.add_get("/p/{pb}/focus", self.focus)
        app.router.add_get("/p/{pb}/entry/{entry}", self.entry)
        app.router.add_post("/p/{pb}/decide", self.decide)
        app.router.add_post("/p/{pb}/undo", self.undo)
        app.router.add_get(KEYS_PATH, self.keys)
        context = tls_context(self.settings)
        self._tls = context is not None
        guard(app, door_policy(self.settings, self.host, "combee ui"), PAGE_HEADERS, tls=self._tls)
        self._runner, self.port = await start_app(app, self.host, self.port, ssl_context=context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return http_url(self.host, self.port, "/", tls=self._tls)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.token is None:
            return await handler(request)
        given = request.query.get("token") or request.cookies.get(COOKIE) or \
            request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            return web.Response(status=401, text="a token is required (COMBEE_UI_TOKEN): open the page with "
                                "?token=...", content_type="text/plain")
        if "token" in request.query:  # keep it in a cookie, and out of the address bar and the history
            response = web.HTTPSeeOther(request.rel_url.with_query({k: v for k, v in request.query.items()
                                                                   if k != "token"}))
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", secure=self._tls)
            raise response
        return await handler(request)

    async def index(self, request: web.Request) -> web.Response:
        ids = await playbook_ids(self.settings, self.bootstrap, self.profile)
        if len(ids) == 1:
            raise web.HTTPSeeOther(f"/p/{quote(ids[0])}")
        return _html(index_page(ids))

    async def playbook(self, request: web.Request) -> web.Response:
        pb = request.match_info["pb"]
        try:
            query = _query(request)
        except ReviewInputError as error:
            return _html(error_page(str(error)), status=400)
        scopes = scope_choices(pb, parse_parents(self.settings.playbook_parents))
        scope = request.query.get("scope") or pb
        if scope != pb:
            if scope not in scopes:
                return _html(error_page(f"no scope {scope!r} for {pb}: choose {', '.join(scopes)}"), status=400)
            raise web.HTTPSeeOther(f"/p/{quote(scope)}?{query.address()}")
        snapshot = await read_snapshot(self.settings, self.bootstrap, self.profile, pb)
        return _html(playbook_page(snapshot, review_mode=review_on(self.settings.review_playbooks, pb),
                                   reviewer=self._reviewer(request), csrf=self.csrf, done=request.query.get("done", ""),
                                   judge=self._judge(pb), query=query, undo_id=request.query.get("undo", ""),
                                   scopes=scopes))

    async def focus(self, request: web.Request) -> web.Response:
        """One proposal of the filter at a time (``at``: its position; ``after``: the entry just decided)."""
        pb = request.match_info["pb"]
        try:
            query = _query(request)
            at = request.query.get("at", "1")
            if not at.isdigit():
                raise ReviewInputError(f"at {at!r} is not a position (1, 2, ...)")
        except ReviewInputError as error:
            return _html(error_page(str(error)), status=400)
        scopes = scope_choices(pb, parse_parents(self.settings.playbook_parents))
        scope = request.query.get("scope") or pb
        if scope != pb and scope in scopes:
            raise web.HTTPSeeOther(f"/p/{quote(scope)}/focus?{query.address(at=1)}")
        snapshot = await read_snapshot(self.settings, self.bootstrap, self.profile, pb)
        found = focused(snapshot.state.proposals, query, int(at), request.query.get("after", ""))
        return _html(focus_page(snapshot, found, query, reviewer=self._reviewer(request), csrf=self.csrf,
                                done=request.query.get("done", ""), undo_id=request.query.get("undo", ""),
                                scopes=scopes, judge=self._judge(pb)))

    async def keys(self, request: web.Request) -> web.Response:
        return web.Response(text=KEYS_SCRIPT, content_type="text/javascript", charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    def _reviewer(self, request: web.Request) -> str:
        return unquote(request.cookies.get(REVIEWER_COOKIE, "")) or self.reviewer

    def _judge(self, playbook_id: str) -> Judge:
        """Curation's judge for ``playbook_id`` (the embedder made once), its vectors kept between pages."""
        if self._embedder is None:
            self._embedder = (embedder_from(self.settings),)
        embedder = self._embedder[0]
        cache = self._embeddings.setdefault(playbook_id, EmbeddingCache(embedder)) if embedder else None
        return curation_judge(embedder, self.settings.same_meaning, cache)

    async def entry(self, request: web.Request) -> web.Response:
        pb, entry_id = request.match_info["pb"], request.match_info["entry"]
        snapshot = await read_snapshot(self.settings, self.bootstrap, self.profile, pb)
        history = entry_history(snapshot.versions, entry_id)
        current = next((e for v in reversed(snapshot.versions) for e in v.entries if e.entry_id == entry_id), None)
        if current is None:
            return _html(error_page(f"{pb} has no entry {entry_id}"), status=404)
        made = making_version(snapshot.versions, current)
        reflections, traces = await provenance(self.settings, self.bootstrap, self.profile,
                                               made.lineage if made else [])
        near = closest_reflections(current.content, reflections)
        return _html(entry_page(snapshot, entry_id, history, near, reflections_traces(near, traces),
                                made.version if made else None))

    async def decide(self, request: web.Request) -> web.Response:
        pb = request.match_info["pb"]
        form = await request.post()
        if not hmac.compare_digest(str(form.get("csrf", "")).encode(), self.csrf.encode()):
            return _html(error_page("the form is stale or not from this page: reload it"), status=403)
        try:
            action, entries, note, content = _chosen(form)
            shown = str(form.get("version", ""))
            if not shown.isdigit():
                raise ReviewInputError("the form names no version: reload the page")
            snapshot = await read_snapshot(self.settings, self.bootstrap, self.profile, pb)
            reviewer = str(form.get("reviewer", "")).strip() or self.reviewer
            # the entries as the page showed them (the served version may have moved on since)
            decision = make_decision(snapshot.version(int(shown)), action, entries, reviewer=reviewer,
                                     decided_at=utc_now(), note=note, content=content)
        except ReviewInputError as error:
            return _html(error_page(str(error)), status=400)
        await write_decision(self.settings, self.bootstrap, self.profile, decision)
        done = f"{decision.action} {', '.join(i.entry_id for i in decision.items)} by {decision.reviewer}"
        raise _back(pb, form, done, decision.decision_id, decision.reviewer, after=decision.items[0].entry_id)

    async def undo(self, request: web.Request) -> web.Response:
        """Take back the decision the form names (its Undo button)."""
        pb = request.match_info["pb"]
        form = await request.post()
        if not hmac.compare_digest(str(form.get("csrf", "")).encode(), self.csrf.encode()):
            return _html(error_page("the form is stale or not from this page: reload it"), status=403)
        try:
            snapshot = await read_snapshot(self.settings, self.bootstrap, self.profile, pb)
            reviewer = str(form.get("reviewer", "")).strip() or self.reviewer
            undo = make_undo(pb, snapshot.decisions, str(form.get("decision", "")), reviewer=reviewer,
                             decided_at=utc_now())
        except ReviewInputError as error:
            return _html(error_page(str(error)), status=400)
        await write_decision(self.settings, self.bootstrap, self.profile, undo)
        undone = next(d for d in snapshot.decisions if d.decision_id == undo.undoes)
        done = f"undid {undone.action} {', '.join(i.entry_id for i in undo.items)} by {undo.reviewer}"
        raise _back(pb, form, done, "", undo.reviewer)


def _query(request: web.Request) -> InboxQuery:
    return InboxQuery.parse(*(request.query.get(name, "") for name in ("section", "state", "page", "q")))


def _back(pb: str, form: MultiDictProxy, done: str, undo_id: str, reviewer: str, after: str = "") -> web.HTTPSeeOther:
    """The redirect after a decision: the view, filter, search and page (or position) the form was sent from, with
    what was done and the decision's id (its Undo button); the reviewer's name kept in a cookie."""
    def field(name: str) -> str:
        return str(form.get(f"back_{name}", ""))

    try:
        query = InboxQuery.parse(field("section"), field("state"), field("page"), field("q"))
    except ReviewInputError:
        query = InboxQuery()
    more: dict[str, str | int] = {"done": done}
    if undo_id:
        more["undo"] = undo_id
    if field("view") == "focus":
        at = field("at")
        more |= {"at": int(at) if at.isdigit() else 1, "after": after}
        response = web.HTTPSeeOther(f"/p/{quote(pb)}/focus?{query.address(**more)}")
    else:
        response = web.HTTPSeeOther(f"/p/{quote(pb)}?{query.address(**more)}")
    response.set_cookie(REVIEWER_COOKIE, quote(reviewer), httponly=True, samesite="Strict")
    return response


def _chosen(form: MultiDictProxy) -> tuple[str, list[str], str, str | None]:
    """(action, entry ids, note, new content) from the inbox form: one entry's button, or a bulk button."""
    one = str(form.get("one", ""))
    if one:
        action, _, entry_id = one.partition(":")
        content = str(form.get(f"content:{entry_id}", "")) if action == "edit" else None
        return action, [entry_id], str(form.get(f"note:{entry_id}", "")), content
    action = str(form.get("bulk", ""))
    if not action:
        raise ReviewInputError("the form names no decision: press Approve, Reject or Save edit")
    entries = [str(value) for value in form.getall("entry", [])]
    if not entries:
        raise ReviewInputError("tick at least one entry for a bulk decision")
    return action, entries, str(form.get("bulk_note", "")), None


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY"})
