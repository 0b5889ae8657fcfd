"""The one base of every failure a user can expect (and fix): the CLI catches :class:`CombeeError` once, in
``streams.cli.main``, and prints it as one line, ``combee COMMAND: MESSAGE``, exiting with its :attr:`exit_code`.

Each subclass keeps the built-in base it had (``ValueError``, ``TimeoutError``, ``ConnectionError`` ...), so code
that catches those still does. What is not a ``CombeeError`` is a bug, and keeps its traceback."""

from __future__ import annotations


class CombeeError(Exception):
    """An expected failure: its message is one line a user can act on."""

    exit_code: int = 2
    """The ``combee`` command's exit status when this failure ends it (2: something the user can fix)."""


def one_line(error: BaseException, most: int = 300) -> str:
    """``error`` as one line for a dead letter's reason or an HTTP 400: its type, then the first line of its message
    (at most ``most`` characters)."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= most else text[: most - 1] + "…"
