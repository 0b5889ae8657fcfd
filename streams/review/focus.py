"""The review page's focused view (``/p/{pb}/focus``): one proposal of the inbox's filter at a time, with its
evidence and likely duplicates, Approve / Reject with a note / Edit, and decide-and-next: after a decision the view
shows the next proposal of the same filter. Keyboard shortcuts (``streams.review.forms.KEYS_SCRIPT``) press its
buttons: a approve, r reject (the note field, Enter), e edit, u undo the last decision, j/k next/previous, / search."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from combee_core.models import PlaybookEntry
from combee_core.playbook.embedding import EmbeddingError
from combee_core.playbook.meaning import Judge
from combee_core.serve.review import ProposalRow, inbox
from combee_core.serve.review_context import likely_pairs
from combee_core.serve.review_inbox import Focused, InboxQuery, sections_of
from combee_core.serve.review_undo import undoable
from streams.review.forms import back_fields, e, flash, legend
from streams.review.log import ReviewSnapshot
from streams.review.page import _entry, _evidence, _page, filter_form


def focus_page(snapshot: ReviewSnapshot, found: Focused, query: InboxQuery, *, reviewer: str, csrf: str,
               done: str = "", undo_id: str = "", scopes: Sequence[str] = (), judge: Judge | None = None) -> str:
    pb = snapshot.playbook_id
    back = back_fields(query, "focus", found.at)
    parts = [f"<p><a href='/p/{quote(pb)}?{e(query.address())}'>&larr; {e(pb)}: the whole page</a></p>",
             f"<h1>Review {e(pb)} <span class=muted>one at a time</span></h1>",
             flash(pb, done, undo_id, undoable(pb, snapshot.decisions), csrf, reviewer, back),
             f"<p class=stats><span>inbox <b id=inbox-count>{len(inbox(snapshot.state.proposals))}</b></span>"
             f"<span>served version <b>v{snapshot.state.served_version}</b></span></p>",
             filter_form(pb, sections_of(snapshot.state.proposals), query, scopes, "focus"), legend("arejku/")]
    row = found.row
    if row is None:
        parts.append("<p id=focus-empty>" + ("Nothing waits for review." if query == InboxQuery() else
                                               "No proposal matches the filter.") + "</p>")
        return _page(f"Review {pb}", "".join(parts))

    def link(at: int | None, text: str, ident: str, key: str) -> str:
        if at is None:
            return f"<span class=muted>{text}</span>"
        return f"<a id={ident} data-key={key} href='/p/{quote(pb)}/focus?{e(query.address(at=at))}'>{text}</a>"

    key, version = e(row.entry_id), snapshot.state.served_version
    parts.append(f"<p>Deciding as <b id=reviewer>{e(reviewer)}</b> <span class=muted>(the name last used in this "
                 "browser; change it in the list's form)</span></p>")
    hidden = (f"<input type=hidden name=csrf value='{e(csrf)}'><input type=hidden name=version value='{version}'>"
              f"<input type=hidden name=reviewer value='{e(reviewer)}'>{back}")
    action = f"/p/{quote(pb)}/decide"
    served = snapshot.served.entries if snapshot.served else []
    parts += [
        f"<p id=focus-position><b id=focus-at>{found.at} of {found.matching}</b> &nbsp; "
        f"{link(found.previous_at, '&larr; previous', 'previous', 'k')}"
        f" · {link(found.next_at, 'next &rarr;', 'next', 'j')}</p>",
        f"<div class=focus id='focus-{key}' data-entry='{key}'>"
        f"<p><a href='/p/{quote(pb)}/entry/{quote(row.entry_id)}'>{key}</a> <span class=muted>v{row.first_version} · "
        f"{e(row.section)} · {e(row.status)}</span></p><p class=content id=focus-content>{e(row.content)}</p>"
        f"<form method=post action='{action}' id=focus-approve>{hidden}"
        f"<button name=one value='approve:{key}' data-key=a id=approve>Approve</button></form>"
        f"<form method=post action='{action}' id=focus-reject>{hidden}"
        f"<input type=text name='note:{key}' id=note placeholder='why reject (Enter rejects)' data-key=r "
        f"aria-label='note {key}' style='width:24em'> <button name=one value='reject:{key}' id=reject>Reject</button>"
        f"</form><details data-key=e id=focus-edit><summary>edit</summary><form method=post action='{action}'>"
        f"{hidden}<textarea name='content:{key}' rows=3>{e(row.content)}</textarea>"
        f"<button name=one value='edit:{key}' id=save-edit>Save edit</button></form></details>"
        f"<p class=muted id=focus-evidence>{_evidence(snapshot, row.entry_id)}</p>{_pairs(row, served, judge)}</div>"]
    return _page(f"Review {pb}: {row.entry_id}", "".join(parts))


def _pairs(row: ProposalRow, served: Sequence[PlaybookEntry], judge: Judge | None) -> str:
    """Likely duplicates and conflicts of the focused proposal among the served entries (one line each)."""
    try:
        pairs = likely_pairs([_entry(row)], served, judge)
    except EmbeddingError as error:
        return f"<p class=muted>Duplicates and conflicts not judged: {e(error)}</p>"
    lines = "".join(f"<li>{e(p.kind)} as {e(p.other_id)} ({p.score:.2f} · {e(p.reason)})</li>" for p in pairs)
    return f"<ul id=focus-pairs class=muted>{lines}</ul>" if lines else ""
