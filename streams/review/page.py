"""The review web page, rendered on the server (one script file, for keyboard shortcuts only: every action is a plain
form): the inbox as one form (per-entry approve, reject with a note and edit; bulk approve or reject of the ticked
entries) under a filter and search, what agents are served with the diff to the previous served version, likely
duplicates and conflicts, promotion and review decisions (each with Undo), the rejection rate; and an entry's page:
its history across versions and its provenance (the version, operations, reflections and traces behind it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from urllib.parse import quote

from combee_core.models import PlaybookEntry, Trace
from combee_core.playbook.embedding import EmbeddingError
from combee_core.playbook.meaning import Judge
from combee_core.playbook.outcomes import credit
from combee_core.serve.review import ProposalRow, entry_changes, inbox
from combee_core.serve.review_context import (
    LIKENESS_FLOOR,
    HistoryRow,
    LikelyPair,
    NearReflection,
    added_support,
    likely_pairs,
    operations_on,
)
from combee_core.serve.review_inbox import STATES, InboxPage, InboxQuery, inbox_page, sections_of
from combee_core.serve.review_undo import undoable
from streams.review.forms import KEYS_PATH, back_fields, flash, legend, undo_form
from streams.review.log import ReviewSnapshot

STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:72em;color:#222;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eee;padding:.3em .4em;vertical-align:top;
text-align:left}th{font-weight:600;background:#f6f6f6}.muted{color:#777}.tag{font-size:.8em;padding:0 .4em;
border-radius:.3em;background:#eee}.approved{background:#d8f0d8}.rejected{background:#f6d6d6}
.proposed{background:#fff0c0}.added{color:#176117}.removed{color:#9b1c1c}.changed{color:#8a5a00}
textarea{width:100%;font:inherit}.decide{white-space:nowrap}.decide input{width:11em}button{margin:.1em}
.flash{background:#e8f0fe;padding:.5em;border-radius:.3em}.stats span{margin-right:1.5em}
form.undo{display:inline}kbd{border:1px solid #bbb;border-radius:.2em;padding:0 .3em;font-size:.85em}
.focus{border:1px solid #ddd;border-radius:.4em;padding:1em;margin:1em 0}.focus .content{font-size:1.15em}
.undone{text-decoration:line-through;color:#777}
"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<meta name=viewport content='width=device-width'><style>{STYLE}</style>"
            f"<script src='{KEYS_PATH}' defer></script></head><body>{body}</body></html>")


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def index_page(playbook_ids: Sequence[str]) -> str:
    links = "".join(f"<li><a href='/p/{quote(pb)}'>{_e(pb)}</a></li>" for pb in playbook_ids)
    return _page("Combee review", "<h1>Combee review</h1>" + (f"<ul>{links}</ul>" if links else
                                                               "<p>No playbook has a version yet.</p>"))


def error_page(message: str) -> str:
    return _page("Combee review: error", f"<h1>Cannot do that</h1><p id=error>{_e(message)}</p>"
                 "<p><a href='/'>Back to the playbooks</a></p>")


def playbook_page(snapshot: ReviewSnapshot, *, review_mode: bool, reviewer: str, csrf: str, done: str = "",
                  judge: Judge | None = None, query: InboxQuery | None = None, undo_id: str = "",
                  scopes: Sequence[str] = ()) -> str:
    """The playbook's review page; ``judge``: curation's (:func:`~combee_core.serve.review_context.curation_judge`;
    None: the lexical one); ``query``: the inbox's filter and page (default: proposed, every section, page 1);
    ``done``/``undo_id``: what the last decision did and its id (an Undo button while it counts); ``scopes``: the
    playbooks of its parent chain the filter offers."""
    query = query or InboxQuery()
    state, pb = snapshot.state, snapshot.playbook_id
    can_undo = undoable(pb, snapshot.decisions)
    back = back_fields(query, "list")
    waiting = inbox(state.proposals)
    served = snapshot.served.entries if snapshot.served else []
    rate = "none decided yet" if state.rejection_rate is None else f"{state.rejection_rate:.0%}"
    mode = "on" if review_mode else "off: agents get every entry (set COMBEE_REVIEW_PLAYBOOKS)"
    parts = [f"<h1>Playbook {_e(pb)} <span class=muted>review</span></h1>",
             flash(pb, done, undo_id, can_undo, csrf, reviewer, back),
             "<p class=stats>"
             f"<span>served version <b id=served-version>v{state.served_version}</b></span>"
             f"<span>agents get <b id=approved-count>{len(state.view.entries)}</b> of {len(served)} entries</span>"
             f"<span>inbox <b id=inbox-count>{len(waiting)}</b></span>"
             f"<span>rejection rate <b id=rejection-rate>{rate}</b></span>"
             f"<span>review mode <b>{_e(mode)}</b></span></p>",
             filter_form(pb, sections_of(state.proposals), query, scopes, "list"), legend("jku/"),
             _inbox(snapshot, inbox_page(state.proposals, query), query, reviewer, csrf),
             _pairs_or_why(waiting, served, judge), _served(snapshot), _diff(snapshot),
             _review_log(snapshot, can_undo, csrf, reviewer, back), _promotions(snapshot)]
    return _page(f"Review {pb}", "".join(parts))


def _entry(row: ProposalRow) -> PlaybookEntry:
    return PlaybookEntry(entry_id=row.entry_id, section=row.section, content=row.content,
                         created_version=row.first_version, updated_version=row.first_version)


def _evidence(snapshot: ReviewSnapshot, entry_id: str) -> str:
    """What backs a proposal: the support of the insight that added it, its helpful/harmful tags and its outcome
    credit in the served version."""
    served = snapshot.served
    entry = next((e for e in served.entries if e.entry_id == entry_id), None) if served else None
    support = added_support(snapshot.versions, entry_id)
    parts = [f"support {support}" if support is not None else "support not recorded"]
    if served is not None and entry is not None:
        parts += [f"helpful {entry.helpful} · harmful {entry.harmful}",
                  f"outcome {credit(entry.outcome, served.baseline).describe()}"]
    return "<br>".join(_e(part) for part in parts)


def filter_form(pb: str, sections: Sequence[str], query: InboxQuery, scopes: Sequence[str], view: str) -> str:
    """The inbox's filter and search: a GET form on the page's own address (``view`` list or focus); a scope other
    than ``pb`` opens that playbook's page with the same filter."""
    def options(values: Sequence[str], chosen: str, every: str | None = None) -> str:
        first = f"<option value=''>{_e(every)}</option>" if every is not None else ""
        return first + "".join(f"<option value='{_e(v)}'{' selected' if v == chosen else ''}>{_e(v)}</option>"
                               for v in values)

    scope = (f" scope <select name=scope aria-label=scope>{options(scopes, pb)}</select>" if len(scopes) > 1 else "")
    action = f"/p/{quote(pb)}" + ("/focus" if view == "focus" else "")
    other = (f"<a id=view-focus href='/p/{quote(pb)}/focus?{_e(query.address(at=1))}'>Focused view: one at a time"
             "</a>" if view == "list" else f"<a id=view-list href='/p/{quote(pb)}?{_e(query.address())}'>The list</a>")
    return (f"<h2>Inbox</h2><form method=get action='{action}' id=filter>Section <select "
            f"name=section aria-label=section>{options(sections, query.section, 'every')}"
            f"</select> state <select name=state aria-label=state>{options(STATES, query.state)}</select>{scope} "
            f"search <input type=search name=q id=search value='{_e(query.q)}' data-key='/' aria-label=search "
            "placeholder='words in the entry'> "
            f"<button id=filter-apply>Show</button> {other}</form>")


def _pager(pb: str, found: InboxPage, query: InboxQuery) -> str:
    def link(page: int, text: str, ident: str) -> str:
        key = {"page-next": "j", "page-previous": "k"}[ident]
        return f"<a id={ident} data-key={key} href='/p/{quote(pb)}?{_e(query.address(page=page))}'>{text}</a>"

    last = found.first + len(found.rows) - 1
    return (f"<p id=pager>{found.first}-{last} of {found.matching} (page {found.page} of {found.pages})"
            + (f" {link(found.page - 1, '&larr; previous', 'page-previous')}" if found.page > 1 else "")
            + (f" {link(found.page + 1, 'next &rarr;', 'page-next')}" if found.page < found.pages else "") + "</p>")


def _inbox(snapshot: ReviewSnapshot, found: InboxPage, query: InboxQuery, reviewer: str, csrf: str) -> str:
    rows = found.rows
    if not rows:
        return ("<p id=inbox-empty>Nothing waits for review.</p>" if query == InboxQuery() else
                "<p id=inbox-empty>No proposal matches the filter.</p>")
    pb, version = snapshot.playbook_id, snapshot.state.served_version
    body = []
    for row in rows:
        key = _e(row.entry_id)
        body.append(
            f"<tr id='row-{key}' class=proposed><td><input type=checkbox name=entry value='{key}' "
            f"aria-label='select {key}'></td><td><a href='/p/{quote(pb)}/entry/{quote(row.entry_id)}'>{key}</a>"
            f"<div class=muted>v{row.first_version} · {_e(row.section)}</div></td>"
            f"<td class=content>{_e(row.content)}<details><summary>edit</summary>"
            f"<textarea name='content:{key}' rows=2>{_e(row.content)}</textarea>"
            f"<button name=one value='edit:{key}'>Save edit</button></details></td>"
            f"<td class='evidence muted' id='evidence-{key}'>{_evidence(snapshot, row.entry_id)}</td>"
            f"<td class=decide><button name=one value='approve:{key}'>Approve</button> "
            f"<input type=text name='note:{key}' placeholder='why reject' aria-label='note {key}'> "
            f"<button name=one value='reject:{key}'>Reject</button></td></tr>")
    # the form's first button, disabled: Enter in a note field submits nothing (not the first row's Save edit)
    return (f"{_pager(pb, found, query)}<form method=post action='/p/{quote(pb)}/decide' id=inbox>"
            "<button type=submit disabled hidden aria-hidden=true id=no-enter></button>"
            f"<input type=hidden name=csrf value='{_e(csrf)}'><input type=hidden name=version value='{version}'>"
            f"{back_fields(query, 'list')}<p>Reviewer <input type=text name=reviewer value='{_e(reviewer)}' "
            "style='width:16em'></p>"
            "<table><tr><th></th><th>entry</th><th>proposed text</th><th>evidence</th><th>decide</th></tr>"
            f"{''.join(body)}</table><p>Ticked entries: <button name=bulk value=approve id=bulk-approve>Approve "
            "selected</button> <input type=text name=bulk_note placeholder='why reject' style='width:20em'> "
            "<button name=bulk value=reject id=bulk-reject>Reject selected</button></p></form>")


def _pairs_or_why(waiting: Sequence[ProposalRow], served: Sequence[PlaybookEntry], judge: Judge | None) -> str:
    try:
        return _pairs(likely_pairs([_entry(row) for row in waiting], served, judge))
    except EmbeddingError as error:  # the page still serves its reviewers without the judge
        return f"<h2>Likely duplicates and conflicts</h2><p class=muted>Not judged: {_e(error)}</p>"


def _pairs(pairs: Sequence[LikelyPair]) -> str:
    if not pairs:
        return ""
    rows = "".join(f"<tr><td>{_e(p.entry_id)}</td><td>{_e(p.kind)}</td><td>{_e(p.other_id)}</td>"
                   f"<td>{p.score:.2f} · {_e(p.reason)}</td></tr>" for p in pairs)
    return ("<h2>Likely duplicates and conflicts</h2><table id=pairs><tr><th>proposed</th><th>judged</th>"
            f"<th>served entry</th><th>why</th></tr>{rows}</table>")


def _served(snapshot: ReviewSnapshot) -> str:
    view = snapshot.state.view
    edited = {edit.entry_id: edit for edit in view.edits}
    held = set(view.held_back)
    rows = []
    for entry in view.entries:
        tag = (f" <span class=tag>edited by {_e(edited[entry.entry_id].reviewer)}</span>"
               if entry.entry_id in edited else "")
        tag += " <span class=tag>earlier approved text</span>" if entry.entry_id in held else ""
        link = f"<a href='/p/{quote(view.playbook_id)}/entry/{quote(entry.entry_id)}'>{_e(entry.entry_id)}</a>"
        rows.append(f"<tr class=approved data-entry='{_e(entry.entry_id)}'><td>{link}</td>"
                    f"<td>{_e(entry.section)}</td><td>{_e(entry.content)}{tag}</td></tr>")
    withheld = f"<p class=muted>Withheld: {_e(', '.join(view.withheld))}</p>" if view.withheld else ""
    return (f"<h2>What agents are served (v{view.version}, approved entries)</h2><table id=served>"
            f"<tr><th>entry</th><th>section</th><th>text</th></tr>{''.join(rows)}</table>{withheld}")


def _diff(snapshot: ReviewSnapshot) -> str:
    if snapshot.served is None:
        return ""
    before = snapshot.previous.entries if snapshot.previous else []
    status = {row.entry_id: row.status for row in snapshot.state.proposals if row.current}
    changes = entry_changes(before, snapshot.served.entries)
    rows = "".join(f"<tr class={c.kind}><td>{c.kind}</td><td>{_e(c.entry_id)}</td><td>{_e(c.before or '')}</td>"
                   f"<td>{_e(c.after or '')}</td><td>{_e(status.get(c.entry_id, ''))}</td></tr>" for c in changes)
    was = f"v{snapshot.previous.version}" if snapshot.previous else "the empty playbook"
    if not changes:
        return f"<h2>Diff: v{snapshot.served.version} against {was}</h2><p id=diff-empty>No changes.</p>"
    return (f"<h2>Diff: v{snapshot.served.version} against {was}</h2><table id=diff><tr><th>change</th><th>entry"
            f"</th><th>before</th><th>after</th><th>review</th></tr>{rows}</table>")


def _review_log(snapshot: ReviewSnapshot, can_undo: set[str], csrf: str, reviewer: str, back: str) -> str:
    """The decisions, newest first: each one that still counts has Undo; an undone one is struck through."""
    undone = set(snapshot.state.undone)
    rows = []
    for d in reversed(snapshot.decisions[-50:]):
        what = f"undo of {d.undoes[:12]}" if d.undoes else d.action
        if d.decision_id in can_undo:
            act = undo_form(snapshot.playbook_id, d.decision_id, csrf, reviewer, back)
        else:
            act = "<span class=tag>undone</span>" if d.decision_id in undone else ""
        rows.append(f"<tr id='decision-{d.decision_id[:12]}'{' class=undone' if d.decision_id in undone else ''}>"
                    f"<td>{_e(d.decided_at.strftime('%Y-%m-%d %H:%M:%S'))}</td><td>{_e(d.reviewer)}</td>"
                    f"<td>{_e(what)}</td><td>{_e(', '.join(f'{i.entry_id} (v{i.version})' for i in d.items))}</td>"
                    f"<td>{_e(d.edit.content if d.edit else d.note)}</td><td>{act}</td></tr>")
    return ("<h2>Review decisions (newest first)</h2><table id=decisions><tr><th>when (UTC)</th><th>reviewer</th>"
            f"<th>action</th><th>entries</th><th>note / new text</th><th></th></tr>{''.join(rows)}</table>")


def _promotions(snapshot: ReviewSnapshot) -> str:
    if not snapshot.promotions:
        return "<h2>Promotion decisions</h2><p class=muted>None: agents run the newest version.</p>"
    rows = "".join(
        f"<tr><td>{d.decision_id}</td><td>{d.action}</td><td>{d.candidate_version or ''}</td>"
        f"<td>v{d.served_version}</td><td>{_e(d.by)}</td><td>{_e(d.reason)}</td></tr>"
        for d in reversed(snapshot.promotions[-30:]))
    return ("<h2>Promotion decisions</h2><table id=promotions><tr><th>#</th><th>action</th><th>candidate</th>"
            f"<th>served</th><th>by</th><th>reason</th></tr>{rows}</table>")


def entry_page(snapshot: ReviewSnapshot, entry_id: str, history: Sequence[HistoryRow],
               near: Sequence[NearReflection], traces: Iterable[Trace], made_in: int | None) -> str:
    pb = snapshot.playbook_id
    statuses = "".join(f"<tr class={row.status}><td>v{row.first_version}</td><td>{row.status}</td>"
                       f"<td>{_e(row.content)}</td><td>{_e(row.reviewer or '')} {_e(row.note)}</td></tr>"
                       for row in snapshot.state.proposals if row.entry_id == entry_id)
    hist = "".join(f"<tr class={h.change}><td>v{h.version}</td><td>{h.change}</td><td>{_e(h.section)}</td>"
                   f"<td>{_e(h.content)}</td></tr>" for h in history)
    ops = ""
    if made_in is not None:
        version = snapshot.version(made_in)
        ops = "".join(f"<li><code>{_e(op.operation.model_dump_json())}</code></li>"
                      for op in operations_on(version, entry_id))
        ops = (f"<h2>Made in v{made_in}</h2><p>Built on v{version.parent_version} from batch {version.batch_id}; "
               f"{len(version.lineage)} traces in its lineage.</p><ul id=operations>{ops}</ul>")
    refl = "".join(f"<tr><td>{n.score:.2f}</td><td>{_e(n.reflection.reflection_id)}</td>"
                   f"<td>{_e(n.reflection.trace_id)}</td><td>{_e(n.insight)}</td></tr>" for n in near)
    refl = (f"<table id=reflections><tr><th>likeness</th><th>reflection</th><th>trace</th><th>insight</th></tr>"
            f"{refl}</table>" if near else
            f"<p id=reflections-none class=muted>No reflection of that version reads like this entry (likeness at "
            f"least {LIKENESS_FLOOR:.2f}).</p>")
    trace_rows = "".join(f"<tr><td>{_e(t.trace_id)}</td><td>{_e(t.agent_id)}</td><td>v{t.playbook_version}</td>"
                         f"<td>{'ok' if t.success else 'failed' if t.success is False else ''}</td>"
                         f"<td>{_e(t.input[:200])}</td><td>{_e(t.feedback[:300])}</td></tr>" for t in traces)
    return _page(f"{pb} {entry_id}", (
        f"<p><a href='/p/{quote(pb)}'>&larr; {_e(pb)}</a></p><h1>Entry {_e(entry_id)}</h1>"
        f"{_outcome(snapshot, entry_id)}"
        f"<h2>Review of each text</h2><table id=statuses>{statuses}</table>"
        f"<h2>History across versions</h2><table id=history>{hist}</table>{ops}"
        "<h2>Provenance: reflections behind that version, closest first</h2><p class=muted id=likeness-floor>Shown: "
        f"the five whose insight reads most like the entry, at likeness {LIKENESS_FLOOR:.2f} or more (word-sequence "
        f"ratio: a guide, not a record).</p>{refl}"
        "<h2>Their traces</h2><table id=traces><tr><th>trace</th><th>agent</th><th>ran</th><th>outcome</th>"
        f"<th>input</th><th>feedback</th></tr>{trace_rows}</table>"))


def _outcome(snapshot: ReviewSnapshot, entry_id: str) -> str:
    """The entry's outcome credit and evidence in the newest version that holds it, and corrections pending
    against it."""
    for version in reversed(snapshot.versions):
        for entry in version.entries:
            if entry.entry_id == entry_id:
                pending = "".join(f"<li>{_e(c.content)} (support {c.support} traces since v{c.first_version})</li>"
                                  for c in version.challenges if c.entry_id == entry_id)
                return (f"<p id=outcome>In v{version.version}: outcome credit "
                        f"{_e(credit(entry.outcome, version.baseline).describe())}; evidence: helpful "
                        f"{entry.helpful}, harmful {entry.harmful}, used helpful {entry.used_helpful}, used harmful "
                        f"{entry.used_harmful}.</p>" + (f"<ul id=challenges>{pending}</ul>" if pending else ""))
    return ""


def reflections_traces(near: Sequence[NearReflection], traces: Sequence[Trace]) -> list[Trace]:
    """The traces of the shown reflections, in their order."""
    by_id = {t.trace_id: t for t in traces}
    return [by_id[n.reflection.trace_id] for n in near if n.reflection.trace_id in by_id]

