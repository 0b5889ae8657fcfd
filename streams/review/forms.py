"""Pieces the review page's views share: the fields that bring a reviewer back to the same filter after a decision,
the Undo button, the flash after a decision, and the keyboard shortcuts (one script file served from the page's own
origin, ``/static/keys.js``: the CSP allows ``script-src 'self'`` and no inline script)."""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from combee_core.serve.review_inbox import InboxQuery

KEYS_PATH = "/static/keys.js"

KEYS_SCRIPT = """'use strict';
// Combee review page shortcuts: a key presses the element marked data-key="<key>" (a link or button is clicked,
// a field is focused, an edit box opened). Off while typing in a field; Escape leaves the field.
document.addEventListener('keydown', function (event) {
  if (event.ctrlKey || event.metaKey || event.altKey) { return; }
  var target = event.target;
  var typing = target && (target.tagName === 'INPUT' || target.tagName === 'TEXTAREA' ||
                          target.tagName === 'SELECT' || target.isContentEditable);
  if (typing) { if (event.key === 'Escape') { target.blur(); } return; }
  if (event.key.length !== 1 || 'arejku/'.indexOf(event.key) < 0) { return; }
  var element = document.querySelector('[data-key="' + event.key + '"]');
  if (!element) { return; }
  event.preventDefault();
  if (element.tagName === 'DETAILS') {
    element.open = true;
    var box = element.querySelector('textarea');
    if (box) { box.focus(); }
  } else if (element.tagName === 'A' || element.tagName === 'BUTTON') {
    element.click();
  } else {
    element.focus();
  }
});
"""

LEGEND = (("a", "approve"), ("r", "reject (type the note, Enter)"), ("e", "edit"), ("u", "undo the last decision"),
          ("j", "next"), ("k", "previous"), ("/", "search"), ("Esc", "leave a field"))


def e(text: object) -> str:
    return escape(str(text), quote=True)


def legend(keys: str) -> str:
    """The shortcuts of ``keys`` (letters of :data:`LEGEND`) as the page shows them."""
    shown = [f"<kbd>{e(key)}</kbd> {e(what)}" for key, what in LEGEND if key in keys or key == "Esc"]
    return f"<p class='muted keys' id=keys>Keys: {' · '.join(shown)}</p>"


def back_fields(query: InboxQuery, view: str, at: int = 0) -> str:
    """Hidden fields a decision's form carries so the answer returns to this view, filter, search and page."""
    fields = {"section": query.section, "state": query.state, "q": query.q, "page": str(query.page), "view": view,
              "at": str(at)}
    return "".join(f"<input type=hidden name='back_{name}' value='{e(value)}'>" for name, value in fields.items())


def undo_form(pb: str, decision_id: str, csrf: str, reviewer: str, back: str, *, key: bool = False,
              label: str = "Undo") -> str:
    """A one-button form that takes ``decision_id`` back (``u`` presses it when ``key``)."""
    marked = " data-key=u id=undo-last" if key else ""
    return (f"<form method=post action='/p/{quote(pb)}/undo' class=undo><input type=hidden name=csrf value='{e(csrf)}'>"
            f"<input type=hidden name=decision value='{e(decision_id)}'>"
            f"<input type=hidden name=reviewer value='{e(reviewer)}'>{back}"
            f"<button name=undo value='{e(decision_id)}'{marked}>{e(label)}</button></form>")


def flash(pb: str, done: str, undo_id: str, undoable: set[str], csrf: str, reviewer: str, back: str) -> str:
    """What the last decision did, with its Undo button while it can still be undone."""
    if not done:
        return ""
    button = undo_form(pb, undo_id, csrf, reviewer, back, key=True) if undo_id in undoable else ""
    return f"<div class=flash id=flash><span>{e(done)}</span> {button}</div>"
