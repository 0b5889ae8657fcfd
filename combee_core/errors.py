"""The one base of every failure a user can expect (and fix): the CLI catches :class:`CombeeError` once, in
``streams.cli.main``, and prints it as one line, ``combee COMMAND: MESSAGE``, exiting with its :attr:`exit_code`.

Each subclass keeps the built-in base it had (``ValueError``, ``TimeoutError``, ``ConnectionError`` ...), so code
that catches those still does. What is not a ``CombeeError`` is a bug, and keeps its traceback."""

from __future__ import annotations


class CombeeError(Exception):
    """An expected failure: its message is one line a user can act on."""

    exit_code: int = 2
    """The ``combee`` command's exit status when this failure ends it (2: something the user can fix)."""
